"""The template's loop: a `Template` answers the host's requests (``fork``, ``derive``, ``status``,
``reap``, ``exit``) until asked to exit or its parent is gone; `fork_hazards` says what would make a fork
unsafe.

A part of the template's program (see `themisto_env.sandbox.template.zygote`): sent whole with the other
parts, it imports only the standard library, ipykernel and dill, and names of the parts before it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
from typing import Any

from themisto_env.sandbox.template.zygote._channel import _arm_wakeup, _listen, _read_line, _send
from themisto_env.sandbox.template.zygote._children import _become_kernel, _become_state_template
from themisto_env.sandbox.template.zygote._copy_uid import _die_with, _reap_identity, _take_identity

#: How often an idle template checks that its parent still lives.
PARENT_POLL_S = 1.0


class Template:
    """The template's state: its socket, its namespace (a state template's), its reaped children."""

    def __init__(self, socket_path: str, parent: int) -> None:
        self.parent = parent
        self.namespace: dict[str, Any] | None = None  # a state template's loaded user namespace
        self.loaded: list[str] = []  # the names its snapshot held
        self.generator: Any = None  # the random module's state when a child was forked (in that child)
        self.error: str | None = None  # why a state template cannot serve (a corrupt snapshot, ...)
        self.exited: dict[int, int] = {}  # pid -> wait status, of the children reaped
        #: The kernel application built before the fork (its configuration and IPython shell: nothing that
        #: holds a thread, a socket or a loop); None where that failed (a child then builds it all).
        self.app: Any = None
        #: Why the application could not be built before the fork (each child then builds its own), or None.
        self.prebuild_error: str | None = None
        self.listener = _listen(socket_path)
        self.wakeup = _arm_wakeup()

    # -- the loop ------------------------------------------------------------------------------------------

    def serve(self) -> None:
        """Answer requests until asked to exit or the parent is gone."""
        while True:
            self._reap()
            if os.getppid() != self.parent:
                os._exit(0)
            readable, _, _ = select.select([self.listener, self.wakeup], [], [], PARENT_POLL_S)
            if self.wakeup in readable:
                with contextlib.suppress(OSError):
                    os.read(self.wakeup, 4096)
            if self.listener not in readable:
                continue
            connection, _ = self.listener.accept()
            with connection:
                try:
                    request = json.loads(_read_line(connection))
                    self._answer(connection, request)
                except Exception as exc:  # a malformed request is answered, never fatal
                    with contextlib.suppress(OSError):
                        _send(connection, {"error": f"{type(exc).__name__}: {exc}"})

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.exited[pid] = status
            if len(self.exited) > 4096:  # bounded: the oldest statuses go first
                self.exited.pop(next(iter(self.exited)))

    def _answer(self, connection: socket.socket, request: dict[str, Any]) -> None:
        op = request.get("op")
        if op == "status":
            self._reap()
            pid = request.get("pid")
            answer: dict[str, Any] = {"ok": self.error is None, "error": self.error, "pid": os.getpid()}
            answer["prebuild_error"] = self.prebuild_error
            answer["hazards"] = fork_hazards({self.listener.fileno(), self.wakeup, connection.fileno()})
            if isinstance(pid, int) and pid in self.exited:
                answer["exit_status"] = self.exited[pid]
            _send(connection, answer)
        elif op == "exit":
            _send(connection, {"ok": True})
            os._exit(0)
        elif self.error is not None:
            _send(connection, {"error": self.error})
        elif op == "fork":
            self._fork(connection, request, become=_become_kernel)
        elif op == "derive":
            self._fork(connection, request, become=_become_state_template)
        elif op == "reap":
            _send(connection, _reap_identity(request))
        else:
            _send(connection, {"error": f"unknown request {op!r}"})

    def _fork(self, connection: socket.socket, request: dict[str, Any], become: Any) -> None:
        import random

        generator = random.getstate()  # the random module reseeds itself in a forked child: undone below
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 1
            try:
                _die_with(parent)
                _take_identity(request.get("identity"), parent)  # a copy's own uid, limits, folders: first
                random.setstate(generator)  # copies are identical, their random draws included (unless reseeded)
                self.generator = generator  # set again once the kernel started (its start may draw)
                connection.close()
                self.listener.close()
                write_end = signal.set_wakeup_fd(-1)  # the template's SIGCHLD pipe: no end of it stays in a copy
                for end in (self.wakeup, write_end):
                    if end >= 0:
                        with contextlib.suppress(OSError):
                            os.close(end)
                for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
                    signal.signal(number, signal.SIG_DFL)
                become(self, request)
                code = 0
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    sys.stderr.write(f"themisto template child failed: {type(exc).__name__}: {exc}\n")
                    sys.stderr.flush()
            finally:
                os._exit(code)
        pidfd = os.pidfd_open(pid)
        try:
            _send(connection, {"pid": pid}, fds=[pidfd])
        finally:
            os.close(pidfd)


def fork_hazards(own_fds: set[int]) -> list[str]:
    """What would make a fork of this process unsafe or its copies not independent: threads started from
    Python (a fork keeps only the forking thread: a lock another thread held stays held), open sockets and
    files (a copy would share them, and their offsets, with its template and its siblings), an initialised
    CUDA context. Empty when it is safe to fork."""
    import threading

    hazards = [f"thread {t.name!r} runs" for t in threading.enumerate() if t is not threading.main_thread()]
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = []
    for fd in fds:
        if fd <= 2 or fd in own_fds:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed meanwhile
        if target.startswith("socket:"):
            hazards.append(f"an open socket (fd {fd})")
        elif target.startswith("/dev/nvidia"):
            hazards.append(f"a GPU device is open ({target})")
        elif target.startswith("/") and not target.startswith(("/proc/", "/dev/")):
            hazards.append(f"an open file: {target}")
    torch = sys.modules.get("torch")
    with contextlib.suppress(Exception):
        if torch is not None and torch.cuda.is_initialized():
            hazards.append("a CUDA context is initialised")
    return hazards
