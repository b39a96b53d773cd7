"""Fixtures of the sandbox tests: each kernel backend in turn, and the bwrap backend alone."""

from __future__ import annotations

import pytest

from tests.conftest import BACKENDS, needs, require_backend


@pytest.fixture(scope="session")
@needs("bwrap")
def bwrap_backend() -> None:
    """The bwrap backend (the test is marked ``bwrap``, skipped as root or without bubblewrap)."""
    require_backend("bwrap")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each kernel backend in turn (skipped with the reason where it cannot run)."""
    require_backend(request.param)
    return str(request.param)
