"""The bundled data is built on first use in a fresh cache, and checked once per process after that."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from themisto_env.replay import resolve as data


def test_a_fresh_cache_builds_the_bundled_data_and_a_built_one_is_checked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import themisto_env.build.builder as build

    folder = tmp_path / "cache" / "bundled-x-local"
    builds: list[Path] = []
    checks: list[Path] = []

    def fake_build(sources: Any, out: Path, **kw: Any) -> None:  # the real build takes minutes: its effect
        builds.append(Path(out))
        (Path(out) / "manifest.json").write_text("{}")

    def fake_complete(where: Path, backend: str) -> bool:
        checks.append(where)
        return True

    monkeypatch.setattr(data, "bundled_dataset_dir", lambda backend="local": folder)
    monkeypatch.setattr(build, "build_dataset", fake_build)
    monkeypatch.setattr(data, "_complete", fake_complete)
    monkeypatch.setattr(data, "_CHECKED", {})

    assert data.resolve_dataset(None) == folder
    assert builds == [folder], "a fresh cache (no folder, no manifest) is built"
    data.resolve_dataset(None)
    data.resolve_dataset(None)
    assert builds == [folder] and checks == [], "what this process built is not checked again"
    (folder / "manifest.json").write_text('{"changed": true}')
    data.resolve_dataset(None)
    data.resolve_dataset(None)
    assert checks == [folder], "a changed manifest is checked again, once"
    (folder / "manifest.json").unlink()
    data.resolve_dataset(None)
    assert builds == [folder, folder], "a removed manifest is built again"
