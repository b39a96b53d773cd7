"""Progress of long work (a build, a run): a bar on a terminal, a line now and then when piped.

[`ProgressLine`][themisto_env.progress.ProgressLine] writes to stderr (stdout stays for what a command prints:
``themisto data info
--json | jq`` works while the bundled data is built). On a terminal it is rich's live bar; otherwise
(piped, redirected, a CI log) it writes one plain line when it starts, then one every ``every`` seconds
as work advances, and one at the end, so that a log shows the work moving without a bar's control codes.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import IO

LINE_EVERY_S = 10.0
"""Seconds between two progress lines when the output is not a terminal."""


class ProgressLine:
    """One task's progress: ``with ProgressLine("replaying", total=340) as bar: bar.advance()``.

    Args:
        description: What is being done (shown before the counts).
        total: Units of work in all.
        completed: Units already done (a resume).
        show: False shows nothing.
        stream: Where to write (default: stderr); a terminal gets a live bar, anything else lines.
        every: Seconds between two lines when ``stream`` is not a terminal.
    """

    def __init__(
        self,
        description: str,
        total: int,
        *,
        completed: int = 0,
        show: bool = True,
        stream: IO[str] | None = None,
        every: float = LINE_EVERY_S,
    ) -> None:
        from rich.console import Console

        self.description, self.total, self.completed = description, total, completed
        self.show, self.every = show, every
        self._initial = completed
        self._console = Console(file=stream or sys.stderr, soft_wrap=True)
        self._bar = None
        self._task = None
        self._started = self._last = 0.0
        if show and self._console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
            self._bar = Progress(*columns, console=self._console)
            self._task = self._bar.add_task(description, total=total, completed=completed)

    @property
    def is_bar(self) -> bool:
        """Whether a live bar is shown (a terminal), rather than lines."""
        return self._bar is not None

    def __enter__(self) -> ProgressLine:
        self._started = self._last = time.monotonic()
        if self._bar is not None:
            self._bar.__enter__()
        elif self.show:
            self._line()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, error, trace)
        elif self.show:
            self._line(final=True)

    def advance(self, units: int = 1) -> None:
        """Count ``units`` more done."""
        self.update(completed=self.completed + units)

    def update(self, *, description: str | None = None, completed: int | None = None) -> None:
        """Change what is being done, or how much is done."""
        if description is not None:
            self.description = description
        if completed is not None:
            self.completed = completed
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=self.description, completed=self.completed)
        elif self.show and completed is not None and time.monotonic() - self._last >= self.every:
            self._line()

    def _line(self, *, final: bool = False) -> None:
        self._last = now = time.monotonic()
        elapsed = now - self._started
        share = f" ({self.completed / self.total:.0%})" if self.total else ""
        line = f"{self.description}: {self.completed}/{self.total}{share}, {_clock(elapsed)} elapsed"
        if final:
            line += ", done" if self.completed >= self.total else ", stopped"
        elif self._initial < self.completed < self.total and elapsed > 0:
            rate = (self.completed - self._initial) / elapsed
            line += f", about {_clock((self.total - self.completed) / rate)} left"
        self._console.print(line, markup=False, highlight=False)
        self._console.file.flush()


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


__all__ = ["LINE_EVERY_S", "ProgressLine"]
