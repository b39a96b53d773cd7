"""The sources of a build: which files a folder holds, and the sessions each file gives.

`read_sources` reads every source and goes on past one that cannot be read (noted in the build's
report).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from themisto_env.data.june import read_sessions
from themisto_env.data.june_events import REQUIRED_COLUMNS
from themisto_env.data.notebook import read_notebook_session
from themisto_env.data.sessions import Session
from themisto_env.errors import DataError

LOG_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".jsonl", ".jsonl.gz")
"""The suffixes of JuNE event logs."""


def source_files(sources: Iterable[str | Path]) -> list[Path]:
    """Expand folders into the event logs and notebooks they hold (sorted); check files exist."""
    files: list[Path] = []
    for src in map(Path, sources):
        if src.is_dir():
            found = sorted(p for p in src.rglob("*") if p.suffix == ".ipynb" or _looks_like_log(p))
            if not found:
                raise DataError("no JuNE logs (.csv, .parquet, .jsonl) or notebooks (.ipynb) inside", path=src)
            files += found
        elif src.exists():
            files.append(src)
        else:
            raise DataError("no such file or folder", path=src)
    return files


def _looks_like_log(path: Path) -> bool:
    """Whether a file found in a folder is a JuNE log: a log's suffix and, for text logs, the required
    columns in its first line (a notebook's data files, ``data/sales.csv``, are not logs)."""
    if not path.name.endswith(LOG_SUFFIXES) or ".ipynb_checkpoints" in path.parts:
        return False
    if path.suffix == ".parquet" or path.name.endswith(".gz"):
        return True
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.readline(65536)
    except OSError:
        return False
    return all(column in head for column in REQUIRED_COLUMNS)


def read_source(path: Path) -> list[Session]:
    """The sessions of one source file: a notebook's one, or a JuNE log's.

    Raises:
        DataError: The file is not a log or a notebook, or cannot be read (the message names it).
    """
    if path.suffix == ".ipynb":
        return [read_notebook_session(path)]
    if path.name.endswith(LOG_SUFFIXES):
        return read_sessions(path)
    raise DataError("not a JuNE log (.csv, .parquet, .jsonl) or a notebook (.ipynb)", path=path)


def read_sources(sources: Iterable[str | Path], bad_sources: dict[str, str]) -> list[tuple[Path, Session]]:
    """Every session of the sources with the file it came from; a file that cannot be read is noted in
    ``bad_sources`` (path -> why) and left out (the others are built).

    Raises:
        DataError: A source does not exist, or no source could be read (the message names them).
    """
    read: list[tuple[Path, Session]] = []
    files = source_files(sources)
    for path in files:
        try:
            read += [(path, session) for session in read_source(path)]
        except (DataError, OSError, ValueError) as exc:
            bad_sources[str(path)] = " ".join(str(exc).split())
    if bad_sources and len(bad_sources) == len(files):
        why = next(iter(bad_sources.values()))
        more = f" (and {len(files) - 1} more sources that cannot be read)" if len(files) > 1 else ""
        raise DataError(f"nothing to build: {why}{more}")
    return read


__all__ = ["LOG_SUFFIXES", "read_source", "read_sources", "source_files"]
