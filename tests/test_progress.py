"""Progress of builds and runs: a bar on a terminal, plain lines when piped (issue 22)."""

from __future__ import annotations

import io

import pytest

from themisto_env.progress import ProgressLine


def test_piped_progress_is_plain_lines_with_counts() -> None:
    out = io.StringIO()
    with ProgressLine("replaying", 4, stream=out, every=0) as bar:
        assert not bar.is_bar
        bar.advance()
        bar.update(description="replaying sales-1")
        bar.advance(3)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("replaying: 0/4 (0%)")
    assert any(line.startswith("replaying: 1/4 (25%)") and "left" in line for line in lines)
    assert lines[-1].startswith("replaying sales-1: 4/4 (100%)") and lines[-1].endswith("done")
    assert "\x1b" not in out.getvalue()  # no control codes in a log


def test_piped_progress_is_quiet_between_lines_and_says_when_stopped() -> None:
    out = io.StringIO()
    with ProgressLine("run", 10, completed=2, stream=out, every=3600) as bar:
        for _ in range(5):
            bar.advance()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines  # the start and the end: nothing in between within `every`
    assert lines[0].startswith("run: 2/10") and lines[1].startswith("run: 7/10") and lines[1].endswith("stopped")


def test_hidden_progress_writes_nothing() -> None:
    out = io.StringIO()
    with ProgressLine("x", 3, stream=out, show=False, every=0) as bar:
        bar.advance(3)
    assert out.getvalue() == ""


def test_a_terminal_gets_a_live_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    out = io.StringIO()
    with ProgressLine("replaying", 2, stream=out) as bar:
        assert bar.is_bar
        bar.advance(2)
    assert "replaying" in out.getvalue() and "2/2" in out.getvalue()


def test_a_build_shows_its_progress_on_stderr(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """The builder's progress goes to stderr (stdout stays for what a command prints), as lines here."""
    from tests.env_fixtures import write_notebook
    from themisto_env.build.builder import build_dataset

    notebook = write_notebook(tmp_path / "sales.ipynb")
    build_dataset([notebook], tmp_path / "dataset", snapshots=False, snapshot_dir=tmp_path / "snapshots")
    captured = capsys.readouterr()
    assert captured.out == ""
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith("replaying sales-") and "(100%)" in last and last.endswith("done"), captured.err
