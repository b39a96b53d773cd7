"""A deep ``TMPDIR`` does not stop a kernel: the sandbox puts its run directories in a short private folder."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from themisto_env.errors import KernelStartError
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.lifetime import owners
from themisto_env.sandbox.lifetime.run_root import MAX_SOCKET_PATH, run_root, short_root
from themisto_env.sandbox.template.core import KernelTemplate


@pytest.fixture
def deep_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary folder whose path alone leaves no room for a kernel's socket."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    assert len(str(deep)) > MAX_SOCKET_PATH - 20
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    yield deep


def test_a_short_tmpdir_is_kept() -> None:
    assert run_root() == Path(tempfile.gettempdir())


def private_folder_of_mine(folder: Path) -> bool:
    info = folder.lstat()
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700


@pytest.mark.slow  # a kernel and a template start
def test_kernels_start_under_a_deep_tmpdir(deep_tmpdir: Path, tmp_path: Path) -> None:
    root = run_root()
    assert not root.is_relative_to(deep_tmpdir) and private_folder_of_mine(root), root
    with Kernel("local", snapshot_dir=tmp_path / "store") as kernel:
        run_dir = kernel._process.run_dir
        assert run_dir.parent == root
        assert kernel.execute("1 + 1").text() == "2"
    assert not run_dir.exists(), "a run directory in the short folder is removed with its kernel"
    with KernelTemplate("local", snapshot_dir=tmp_path / "store") as template:
        assert template.run_dir.parent == root
        with template.kernel() as forked:  # one level deeper: the longest socket path the sandbox makes
            assert forked.execute("2 + 2").text() == "4"
        template_dir = template.run_dir
    assert not template_dir.exists()


def test_a_short_folder_that_is_not_private_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deep_tmpdir: Path
) -> None:
    taken, free, link_base = tmp_path / "taken", tmp_path / "free", tmp_path / "linked"
    for base in (taken, free, link_base):
        base.mkdir()
    (taken / f"themisto-{os.getuid()}").mkdir(mode=0o755)  # open to others: someone else may plant files
    os.chmod(taken / f"themisto-{os.getuid()}", 0o755)
    (link_base / f"themisto-{os.getuid()}").symlink_to(free)  # a link: never followed
    monkeypatch.setattr(owners, "SHORT_ROOTS", (taken, link_base, free))
    monkeypatch.setattr("themisto_env.sandbox.lifetime.run_root.SHORT_ROOTS", (taken, link_base, free))
    assert short_root() == free / f"themisto-{os.getuid()}"
    assert private_folder_of_mine(short_root())
    monkeypatch.setattr("themisto_env.sandbox.lifetime.run_root.SHORT_ROOTS", (taken, link_base))
    with pytest.raises(KernelStartError, match="set TMPDIR to a short folder"):
        run_root()
