"""The template's channel to the host: its unix socket (a request and an answer per line, file
descriptors passed along), its SIGCHLD wakeup pipe, and a child's log and process name.

A part of the template's program (see `themisto_env.sandbox.template.zygote`): sent whole with the other
parts, it imports only the standard library, ipykernel and dill, and names of the parts before it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from typing import Any

#: A request line's size bound.
MAX_REQUEST = 1 << 16


def _listen(path: str) -> socket.socket:
    """A unix socket listening at ``path`` (made anew), for the host only."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)  # the host's (root or the kernel user) only: kernels run as others where isolated
    listener.listen(64)
    return listener


def _arm_wakeup() -> int:
    """A pipe SIGCHLD writes to (``signal.set_wakeup_fd``), so the loop reaps a child at once."""
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(write_end)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    return read_end


def _read_line(connection: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ValueError("request too long")
    return data


def _send(connection: socket.socket, answer: dict[str, Any], fds: list[int] | None = None) -> None:
    payload = (json.dumps(answer) + "\n").encode()
    if fds:
        socket.send_fds(connection, [payload], fds)
    else:
        connection.sendall(payload)


def _redirect_output(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _name_process(name: str) -> None:
    """The name ``ps`` and ``/proc/PID/comm`` show (a forked kernel's command line is its template's)."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(15, name.encode()[:15])  # PR_SET_NAME
