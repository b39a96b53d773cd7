"""A dataset's manifest: the format version is written, read and checked (an older one is read, a newer one
refused in one line), and ``themisto data info`` shows its kernel environment and working folders (issue 21)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from themisto_env.data.trajectory import FORMAT_VERSION, MANIFEST, read_manifest
from themisto_env.errors import DataError


def test_the_format_version_is_written_read_and_checked(env_dataset: dict[str, str], tmp_path: Path) -> None:
    assert FORMAT_VERSION == 5  # 5: each step says how much its recording held (issue 43)
    assert read_manifest(env_dataset["dataset"]).version == FORMAT_VERSION, "a dataset built now says 4"
    folder = shutil.copytree(env_dataset["dataset"], tmp_path / "dataset")
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**manifest, "version": 3}))
    assert read_manifest(folder).version == 3, "an older dataset is still read"
    (folder / MANIFEST).write_text(json.dumps({**manifest, "version": FORMAT_VERSION + 1}))
    with pytest.raises(DataError, match="newer than this package reads") as caught:
        read_manifest(folder)
    assert "\n" not in str(caught.value)


def test_data_info_shows_the_kernel_environment_and_working_folders(
    env_dataset: dict[str, str], tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from themisto_env.cli import app

    folder = shutil.copytree(env_dataset["dataset"], tmp_path / "dataset")
    manifest = json.loads((folder / MANIFEST).read_text())
    environment = {"id": "0123456789abcdef", "name": "pinned-2023", "python": "3.11", "requirements": "", "apt": []}
    manifest.update(environment=environment, workdirs={"/data/project": "f" * 64})
    (folder / MANIFEST).write_text(json.dumps(manifest))
    done = CliRunner().invoke(app, ["data", "info", str(folder), "--json"])
    assert done.exit_code == 0, done.output
    info = json.loads(done.output)
    assert info["kernel_environment"] == {"id": "0123456789abcdef", "name": "pinned-2023", "python": "3.11"}
    assert info["working_folders"] == {"/data/project": "f" * 64}
    done = CliRunner().invoke(app, ["data", "info", str(folder)], terminal_width=200)
    assert done.exit_code == 0, done.output
    assert "pinned-2023 (Python 3.11)" in done.output and "/data/project (ffffffffffff)" in done.output
    own = CliRunner().invoke(app, ["data", "info", env_dataset["dataset"]], terminal_width=200)
    assert "the tool's own Python" in own.output
