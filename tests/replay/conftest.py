"""Fixtures of the replay tests: pinned kernel environments (venvs pip builds: the test is marked ``environments``)."""

from __future__ import annotations

import pytest

from tests.conftest import needs


@pytest.fixture(scope="session")
@needs("environments")
def pinned_environments() -> None:
    """Pinned kernel environments may be made (venvs pip builds in the user cache: minutes when cold)."""
