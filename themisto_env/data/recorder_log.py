"""The recorder's log file: JuNE rows appended under a lock, and which process last wrote for a kernel.

Several kernels may append to the same JSON Lines log at once: each append takes an exclusive ``flock``
and numbers its rows after the log's last ``action_id``. A sidecar file (``<log>.kernels.json``)
remembers which process last wrote for each kernel, so that a recorder loaded in a new process of a
known kernel can tell a restart from a reload.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any

from themisto_env.data.june_events import JuneEvent


class RecordingLog:
    """A JSON Lines JuNE log the recorder appends to.

    Args:
        path: The log file (created on the first append; its folder must exist).
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, rows: list[dict[str, Any]], *, kernel_id: str) -> None:
        """Append rows as JuNE events, numbered after the log's last ``action_id``.

        Args:
            rows: JuNE fields of each row, without ``action_id``.
            kernel_id: The kernel writing, remembered with this process's id.

        Raises:
            OSError: The log or its sidecar cannot be written.
            pydantic.ValidationError: A row is not a valid JuNE event.
        """
        with open(self.path, "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                next_id = last_action_id(handle) + 1
                lines = [
                    json.dumps(JuneEvent(action_id=next_id + i, **row).to_row(output_as_text=False), ensure_ascii=False)
                    + "\n"
                    for i, row in enumerate(rows)
                ]
                handle.seek(0, os.SEEK_END)
                handle.write("".join(lines).encode("utf-8"))
                handle.flush()
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        self.remember_process(kernel_id)

    def _pids_path(self) -> Path:
        return self.path.with_name(self.path.name + ".kernels.json")

    def kernel_seen_in_another_process(self, kernel_id: str) -> bool:
        """Whether another process last wrote for this kernel (the kernel restarted since).

        Args:
            kernel_id: The kernel.

        Returns:
            True when the sidecar names a process other than this one for the kernel.
        """
        try:
            pids = json.loads(self._pids_path().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(pids, dict) and pids.get(kernel_id) not in (None, os.getpid())

    def remember_process(self, kernel_id: str) -> None:
        """Note in the sidecar that this process writes for the kernel (atomic replace).

        Args:
            kernel_id: The kernel.
        """
        sidecar = self._pids_path()
        try:
            pids = json.loads(sidecar.read_text(encoding="utf-8"))
            if not isinstance(pids, dict):
                pids = {}
        except (OSError, ValueError):
            pids = {}
        if pids.get(kernel_id) == os.getpid():
            return
        pids[kernel_id] = os.getpid()
        tmp = sidecar.with_name(f"{sidecar.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(pids), encoding="utf-8")
        tmp.replace(sidecar)


def last_action_id(handle: Any) -> int:
    """The ``action_id`` of the log's last row (-1 for an empty log), reading only the file's tail."""
    end = handle.seek(0, os.SEEK_END)
    if end == 0:
        return -1
    block = 4096
    position = end
    tail = b""
    while position > 0:
        step = min(block, position)
        position -= step
        handle.seek(position)
        tail = handle.read(step) + tail
        lines = [line for line in tail.split(b"\n") if line.strip()]
        if len(lines) >= 2 or (lines and position == 0):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                return int(json.loads(lines[-1])["action_id"])
            return -1
        block *= 2
    return -1


__all__ = ["RecordingLog", "last_action_id"]
