"""A full disk or a read-only folder ends a command with one line and exit code 1; nothing half-written is
read later: the run resumes with no duplicate or missing row, a build completes.

The folders are tiny tmpfs mounts (root only: the tests skip, saying why, elsewhere); each is unmounted
in a ``finally``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from themisto_env.data.writes import append_line, write_text_atomic

THEMISTO = [sys.executable, "-c", "from themisto_env.cli import main; main()"]


@contextlib.contextmanager
def tmpfs(folder: Path, size: str, *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``folder`` for the block."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root")
    folder.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def themisto(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*THEMISTO, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


def rows(folder: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


def test_a_run_on_a_full_disk_ends_in_one_line_and_resumes(env_dataset: dict[str, str], tmp_path: Path) -> None:
    run = ["run", "--agent", "repeat-previous", "--data", env_dataset["dataset"]]
    with tmpfs(tmp_path / "small", "8k") as small:
        done = themisto(*run, "--out", str(small / "out"), cwd=tmp_path)
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
        (line,) = error_lines(done)
        assert "no space left" in line and "results.jsonl" in line and "run the same command again" in line
        shutil.copytree(small / "out", tmp_path / "out")
    written = rows(tmp_path / "out")  # every line whole: none half-written
    assert 0 < len(written) < 8
    done = themisto(*run, "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    ids = [row["sample_id"] for row in rows(tmp_path / "out")]
    assert len(ids) == len(set(ids)) == 8, "a resume after a full disk has no duplicate and no missing row"
    assert json.loads((tmp_path / "out" / "summary.json").read_text())


def test_a_read_only_folder_is_one_line(env_dataset: dict[str, str], tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "64k", read_only=True) as folder:
        done = themisto(
            "run", "--agent", "repeat-previous", "--data", env_dataset["dataset"], "--out", str(folder / "out"),
            cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 1
    (line,) = error_lines(done)
    assert "read-only" in line and str(folder / "out") in line


@pytest.mark.slow
def test_a_build_on_a_full_disk_ends_in_one_line_and_builds_again(tmp_path: Path) -> None:
    from tests.env_fixtures import write_notebook

    notebook = write_notebook(tmp_path / "sales.ipynb")
    build = ["data", "build", str(notebook), "--no-snapshots"]
    with tmpfs(tmp_path / "small", "12k") as small:
        done = themisto(*build, "--out", str(small / "dataset"), cwd=tmp_path)
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
        (line,) = error_lines(done)
        assert "no space left" in line
        if (small / "dataset").exists():
            shutil.copytree(small / "dataset", tmp_path / "dataset")
    done = themisto(*build, "--out", str(tmp_path / "dataset"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    done = themisto("data", "info", str(tmp_path / "dataset"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]


def test_writes_are_whole_or_absent(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", "16k") as small:
        log = small / "log.jsonl"
        append_line(log, "x" * 100)
        with pytest.raises(OSError) as caught:
            append_line(log, "y" * 100_000)
        assert caught.value.filename == str(log)
        assert log.read_text() == "x" * 100 + "\n", "the failed line was cut back"
        write_text_atomic(small / "summary.json", "{}")
        with pytest.raises(OSError):
            write_text_atomic(small / "summary.json", "z" * 100_000)
        assert (small / "summary.json").read_text() == "{}", "the old content stays whole"
        assert sorted(p.name for p in small.iterdir()) == ["log.jsonl", "summary.json"], "no partial file left"
