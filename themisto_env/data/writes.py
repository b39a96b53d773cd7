"""Writing the product's files so that nothing half-written is ever read later.

A full disk, a quota or a read-only folder can stop any write part-way. Two shapes of writes cover what
the product writes:

* a whole file (a summary, a manifest, a config): `write_text_atomic` writes a temporary file
  beside it and renames it over the old one, so readers see the old file or the new one, never a part;
* a line appended to a log of records (``results.jsonl``, ``trajectories.jsonl``): `append_line`
  writes the whole line or, when the write fails, cuts the file back to where it was.

Both re-raise the ``OSError`` with the file's name set, so that the command line can say in one line
which file could not be written (``themisto_env.commands.common.storage_error_line``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Give an ``OSError`` raised inside the block the file's name, when it has none (a failed ``write``
    or ``flush`` carries no name; ``open`` does)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Replace a file's content at once: readers see the old content or the new, never a part.

    Raises:
        OSError: The temporary file could not be written (no space, read-only, no permission): the old
            file is left as it was, the temporary one removed. Its ``filename`` names ``path``.
    """
    target = Path(path)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    with naming(target):
        try:
            with open(partial, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, target)
        except BaseException:
            with contextlib.suppress(OSError):
                partial.unlink()
            raise


def append_line(file: IO[str] | str | Path, line: str) -> None:
    """Append one line (a newline is added) whole, or not at all.

    Args:
        file: A file opened for appending (its buffer is flushed first), or a path.
        line: The line, without its newline.

    Raises:
        OSError: The line could not be written whole; the file is cut back to its length before the
            write. Its ``filename`` names the file.
    """
    if isinstance(file, (str, Path)):
        with open(file, "a", encoding="utf-8") as handle:
            append_line(handle, line)
        return
    with naming(getattr(file, "name", "?")):
        file.flush()
        fd = file.fileno()
        start = os.lseek(fd, 0, os.SEEK_END)
        data = (line + "\n").encode("utf-8")
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise


__all__ = ["append_line", "naming", "write_text_atomic"]
