"""The kernel template's own program: a process with the imports done that forks new kernels.

This file runs *inside* the template process, started by path (``python zygote.py CONFIG``) with the
kernel's Python (the tool's own, a kernel environment's venv, or a container's), so it imports nothing
of ``themisto_env``: only the standard library, ipykernel and dill. The host side is
:mod:`themisto_env.sandbox.template.core`.

A template holds no thread, no zmq context and no event loop of its own (forking a *running* kernel
breaks its ioloop, its zmq contexts and its threads: ipykernel PRs #410 and #1261). It imports the
dataset's modules, ipykernel and the in-kernel helper once, freezes its objects out of the garbage
collector (``gc.freeze``: a child's collections then do not write to the pages it shares with the
template), and answers requests on a unix socket, one JSON line each:

- ``fork``: fork a child that builds its own ipykernel application (connection file, sockets,
  heartbeat, threads, ioloop) after the fork, in its own session, and becomes a kernel. The reply
  carries the child's pid and, as an ``SCM_RIGHTS`` file descriptor, a pidfd of it (the host watches
  and signals the kernel through it, with no race against pid reuse).
- ``derive``: fork a child that loads a snapshot (its bytes checked against their digest) into a user
  namespace and becomes a template itself, on a socket of its own: the *state template* of that
  snapshot. Kernels forked from it start in that state without loading anything.
- ``status``: the template's state (``ok``, the names it holds, or the error that made it unusable),
  and the exit status of a child it reaped.
- ``exit``: end the template (its kernels go with it: each watches its parent).

A template ends by itself when its parent is gone (it polls ``getppid``, as ipykernel's parent poller
does), and so do the kernels it forked (``JPY_PARENT_PID`` names the template).
"""

from __future__ import annotations

import array
import contextlib
import gc
import hashlib
import importlib
import json
import os
import select
import signal
import socket
import sys
import types
from pathlib import Path
from typing import Any

#: The in-kernel helper's module name (as in kernel_messaging.HELPER_MODULE).
HELPER_MODULE = "_themisto_helper"
#: How often an idle template checks that its parent still lives.
PARENT_POLL_S = 1.0
#: A request line's size bound.
MAX_REQUEST = 1 << 16
#: The kernel application's arguments (a child adds its connection file).
KERNEL_ARGS = ["--HistoryManager.hist_file=:memory:"]


class Template:
    """The template's state: its socket, its namespace (a state template's), its reaped children."""

    def __init__(self, socket_path: str, parent: int) -> None:
        self.socket_path = socket_path
        self.parent = parent
        self.namespace: dict[str, Any] | None = None  # a state template's loaded user namespace
        self.loaded: list[str] = []  # the names its snapshot held
        self.generator: Any = None  # the random module's state when a child was forked (in that child)
        self.error: str | None = None  # why a state template cannot serve (a corrupt snapshot, ...)
        self.exited: dict[int, int] = {}  # pid -> wait status, of the children reaped
        #: The kernel application built before the fork (its configuration and IPython shell: nothing that
        #: holds a thread, a socket or a loop); None where that failed (a child then builds it all).
        self.app: Any = None
        self.listener = self._listen(socket_path)
        self.wakeup = self._arm_wakeup()

    @staticmethod
    def _arm_wakeup() -> int:
        """A pipe SIGCHLD writes to (``signal.set_wakeup_fd``), so the loop reaps a child at once."""
        read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(write_end)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        return read_end

    @staticmethod
    def _listen(path: str) -> socket.socket:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        os.chmod(path, 0o600)  # the host's (root or the kernel user) only: kernels run as others where isolated
        listener.listen(64)
        return listener

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
            answer["hazards"] = fork_hazards({self.listener.fileno(), self.wakeup, connection.fileno()})
            if self.namespace is not None:
                answer["names"] = sorted(n for n in self.namespace if not n.startswith("_"))
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


def _die_with(parent: int) -> None:
    """End this forked child when ``parent`` (its template, one thread) ends: SIGKILL on the parent's death
    (``PR_SET_PDEATHSIG``), and at once if it is already gone (the child then has another parent)."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _take_identity(identity: dict[str, Any] | None, parent: int) -> None:
    """In a forked copy, before anything else runs in it: take the copy's own identity (None: keep the
    template's, as on ``local`` and ``bwrap``). ``identity``: ``uid`` and ``gid`` (a slot the host chose and
    gave the copy's folders to), ``nproc`` (its processes and threads: ``RLIMIT_NPROC`` counts per uid, so it
    bounds this copy only), ``memory_bytes`` (what it may allocate beyond its size at its first
    cell, see `_settle_memory`: ``RLIMIT_DATA``, and ``RLIMIT_AS`` as a backstop), ``tmp`` (its ``TMPDIR``
    and ``HOME``).

    The OOM killer takes a copy before its template (``oom_score_adj`` 1000); then the supplementary groups
    go, the gid and the uid change (real, effective and saved: every capability goes with them, for good),
    and files it makes are its own only (umask 077). The parent-death signal, which a change of uid clears,
    is armed again. Any failure ends the copy before model code could run."""
    if identity is None:
        return
    import ctypes
    import resource

    uid, gid = int(identity["uid"]), int(identity["gid"])
    if uid <= 0 or gid <= 0:
        raise ValueError(f"a copy's identity must not be root: {uid}:{gid}")
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    sizes = _vm_sizes()
    memory = int(identity["memory_bytes"])
    nproc = int(identity["nproc"])
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    # until its first cell, twice the allowance (its kernel's start, a state it restores); then settled
    data = sizes.get("VmData", 0) + 2 * memory
    resource.setrlimit(resource.RLIMIT_DATA, (data, data))
    space = sizes.get("VmSize", 0) + 2 * memory + AS_SLACK
    resource.setrlimit(resource.RLIMIT_AS, (space, space))
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise PermissionError("the copy kept its template's identity")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 1)  # PR_SET_DUMPABLE: its /proc files are its own again (the uid change made them root's)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG, cleared by the change of uid
    if os.getppid() != parent:
        os._exit(1)
    os.umask(0o077)
    tmp = identity["tmp"]
    os.environ.update({"TMPDIR": tmp, "HOME": tmp})
    import tempfile

    tempfile.tempdir = None  # chosen again from $TMPDIR


#: Address space a copy may map beyond its template's size and its memory allowance (thread stacks and
#: malloc arenas reserve address space they never fill); what it fills is bounded by ``RLIMIT_DATA``.
AS_SLACK = 1 << 30


def _settle_memory(shell: Any, memory: int) -> None:
    """At a copy's first cell, before its code runs: its memory allowance counts from its size now (its kernel
    started: thread stacks, sockets, heap, about 80 MiB with ipykernel 7; its state restored), not from its
    size at the fork, when its limits were twice the allowance (`_take_identity`). ``RLIMIT_DATA`` and
    ``RLIMIT_AS`` (soft and hard: the copy cannot raise them again) become its size now plus ``memory``
    (``RLIMIT_AS``: plus `AS_SLACK`), never above what they were."""
    import resource

    def first_cell(*_: Any) -> None:
        shell.events.unregister("pre_run_cell", first_cell)
        sizes = _vm_sizes()
        for limit, size in (
            (resource.RLIMIT_DATA, sizes["VmData"] + memory),
            (resource.RLIMIT_AS, sizes["VmSize"] + memory + AS_SLACK),
        ):
            size = min(size, resource.getrlimit(limit)[1])
            resource.setrlimit(limit, (size, size))

    shell.events.register("pre_run_cell", first_cell)


def _vm_sizes() -> dict[str, int]:
    """This process's ``VmSize`` and ``VmData`` in bytes (``/proc/self/status``)."""
    sizes: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmSize", "VmData"):
                sizes[key] = int(value.split()[0]) * 1024
    return sizes


def _reap_identity(request: dict[str, Any]) -> dict[str, Any]:
    """End everything a copy left (``reap``: its uid's processes, daemons included, and its files in the
    shared ``/tmp`` and ``/dev/shm``), from a child that takes the copy's uid for it: ``kill(-1)`` then
    reaches that uid's processes only, and the template keeps no capability to signal others."""
    uid = int(request["uid"])
    if uid <= 0:
        return {"error": "not a copy's uid"}
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(100):  # what forked between two passes is found by the next
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
            import shutil

            for folder in ("/tmp", "/dev/shm"):
                with contextlib.suppress(OSError):
                    for entry in os.scandir(folder):
                        with contextlib.suppress(OSError):
                            if entry.stat(follow_symlinks=False).st_uid != uid:
                                continue
                            if entry.is_dir(follow_symlinks=False):
                                shutil.rmtree(entry.path, ignore_errors=True)
                            else:
                                os.unlink(entry.path)
            code = 0
        finally:
            os._exit(code)
    # a bounded wait: the copy's own processes may signal (stop) this child once it has their uid, and the
    # template's loop must never hang on it; what it did not end, the host ends (it sees the uid's processes)
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(REAP_WAIT_S * 1000):
            return {"ok": False, "error": f"the reap did not end within {REAP_WAIT_S:g} s"}
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    return {"ok": os.waitstatus_to_exitcode(status) == 0}


#: How long the template waits for a reap child (``reap``) before it answers anyway.
REAP_WAIT_S = 5.0


def _name_process(name: str) -> None:
    """The name ``ps`` and ``/proc/PID/comm`` show (a forked kernel's command line is its template's)."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(15, name.encode()[:15])  # PR_SET_NAME


def _become_kernel(template: Template, request: dict[str, Any]) -> None:
    """In a forked child: finish the kernel application the template built (or build one) on the request's
    connection file, and run it.

    The child's own work starts here, before any socket exists: its process, session, output, folder and
    environment. Then the application opens its sockets and starts its threads (:func:`_finish_app`)."""
    _name_process("ipykernel")
    os.setsid()  # its own process group: the host ends what a cell started with it
    _redirect_output(request["log"])
    os.chdir(request["workdir"])
    os.environ.update(request.get("environment", {}))
    os.environ["PWD"] = request["workdir"]
    os.environ["JPY_PARENT_PID"] = str(os.getppid())  # ipykernel's poller: it ends when the template does
    if template.app is not None:
        app = _finish_app(template.app, request["connection_file"])
    else:
        from ipykernel.kernelapp import IPKernelApp

        app = IPKernelApp.instance(user_ns=template.namespace)
        app.initialize(["-f", request["connection_file"], *KERNEL_ARGS])
    if template.namespace is not None:  # IPython hides what the namespace held at start: the state is the user's
        hidden = app.shell.user_ns_hidden
        for name in template.loaded:
            hidden.pop(name, None)
    _adopt_main_module()
    helper = sys.modules.get(HELPER_MODULE)
    if helper is not None:
        helper.install()
    if request.get("reseed"):
        _reseed()
    else:
        _keep_generator(app.shell, template.generator)
    if request.get("identity"):
        _settle_memory(app.shell, int(request["identity"]["memory_bytes"]))
    app.start()


def _prebuild_app(namespace: dict[str, Any] | None) -> Any:
    """Build, before any fork, the parts of a kernel application that hold no thread, socket or loop: its
    traitlets configuration (command line, config files, profile folder) and its IPython shell (magics,
    completer, prefilter, display machinery, an in-memory history) over ``namespace``. Returns the
    application; each forked child finishes it (:func:`_finish_app`), so its pages stay shared.

    ipykernel builds the shell inside its kernel object, after the sockets; the shell is a singleton, so the
    kernel object a child makes takes this one (``shell_class.instance``) and the child only points it at
    that kernel."""
    from ipykernel.ipkernel import IPythonKernel
    from ipykernel.kernelapp import IPKernelApp
    from IPython.core.application import BaseIPythonApplication

    app = IPKernelApp.instance(user_ns=namespace)
    BaseIPythonApplication.initialize(app, list(KERNEL_ARGS))  # IPKernelApp.initialize's first step
    kernel_class = app.kernel_class
    if not issubclass(kernel_class, IPythonKernel):
        raise TypeError(f"a kernel class of its own ({kernel_class.__name__}): built after the fork")
    traits = kernel_class.class_traits()
    shell_class, compiler_class = traits["shell_class"].default_value, traits["compiler_class"].default_value
    if isinstance(shell_class, str) or isinstance(compiler_class, str):  # traitlets gives names for some Types
        from traitlets.utils.importstring import import_item

        shell_class = import_item(shell_class) if isinstance(shell_class, str) else shell_class
        compiler_class = import_item(compiler_class) if isinstance(compiler_class, str) else compiler_class
    shell_class.instance(  # as IPythonKernel.__init__ asks for it, but the kernel, which the child makes
        parent=app,
        profile_dir=app.profile_dir,
        user_module=None,
        user_ns=namespace,
        kernel=None,
        compiler_class=compiler_class,
    )
    return app


def _prebuild(namespace: dict[str, Any] | None) -> Any:
    """:func:`_prebuild_app`, or None (said in the template's log) where it fails: each child then builds
    its whole application after the fork, as ipykernel does."""
    if os.environ.get("THEMISTO_FORK_PREBUILD", "1") == "0":  # a benchmark's "before" (bench_fork.py)
        return None
    try:
        return _prebuild_app(namespace)
    except Exception as exc:
        with contextlib.suppress(Exception):
            sys.stderr.write(f"themisto template: kernels build their application after the fork ({exc})\n")
        with contextlib.suppress(Exception):
            _drop_app()
        return None


def _drop_app() -> None:
    """Forget a prebuilt application and its shell (the singletons), so that another can be built."""
    from ipykernel.kernelapp import IPKernelApp
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell._instance
    if shell is not None:
        type(shell).clear_instance()  # its class's singleton and its bases' (ZMQInteractiveShell, InteractiveShell)
    IPKernelApp.clear_instance()
    del shell
    gc.collect()


def _finish_app(app: Any, connection_file: str) -> Any:
    """In a forked child: the rest of ``IPKernelApp.initialize`` on a prebuilt application (its sockets,
    heartbeat, output streams, signals, kernel object, extensions and startup code), in ipykernel's own
    order: its ``initialize`` runs with the first step, already done in the template, skipped."""
    from IPython.core.application import BaseIPythonApplication

    app.connection_file = connection_file
    configured = BaseIPythonApplication.initialize
    BaseIPythonApplication.initialize = lambda self, argv=None: None  # this child's copy of the class only
    try:
        app.initialize([])
    finally:
        BaseIPythonApplication.initialize = configured
    shell = app.shell
    shell.kernel = app.kernel  # made by the kernel object in ipykernel's own order; ours predates it
    shell.parent = app.kernel
    cwd = os.getcwd()  # the shell was built in the template's folder: this kernel's own is the start
    shell.starting_dir = cwd
    shell.history_manager.dir_hist[:] = [Path(cwd)]
    return app


def _keep_generator(shell: Any, generator: Any) -> None:
    """Give the random module the template's state again at the copy's first cell: an idle kernel's own
    machinery may draw from it meanwhile (a spare waits a while), so copies would differ by when they ran."""
    import random

    def first_cell(*_: Any) -> None:
        random.setstate(generator)
        shell.events.unregister("pre_run_cell", first_cell)

    random.setstate(generator)
    shell.events.register("pre_run_cell", first_cell)


def _reseed() -> None:
    """Fresh seeds for the global generators a copy inherited (``random``; numpy's, where imported)."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(int.from_bytes(os.urandom(4), "little"))


def _become_state_template(template: Template, request: dict[str, Any]) -> None:
    """In a forked child: load a snapshot into a user namespace and serve forks of it."""
    parent = os.getppid()
    _name_process("themisto-state")
    _redirect_output(request["log"])
    namespace: dict[str, Any] = {"__name__": "__main__"}
    template.listener = Template._listen(request["socket"])
    template.wakeup = Template._arm_wakeup()
    template.parent, template.exited, template.namespace = parent, {}, namespace
    try:
        with open(request["snapshot"], "rb") as f:
            data = f.read()
        digest = hashlib.sha256(data).hexdigest()
        if digest != request["digest"]:
            raise ValueError(f"the snapshot's content hash {digest[:12]} does not match its name")
        template.loaded = _load_state(namespace, data)
    except Exception as exc:  # served as the template's error: every fork request gets it
        template.error = f"{type(exc).__name__}: {exc}"[:2000]
    template.app = None
    _drop_app()  # the template's shell is over its own namespace: this state's is built over the state's
    if template.error is None:
        template.app = _prebuild(namespace)
    gc.collect()
    gc.freeze()
    template.serve()


def _load_state(namespace: dict[str, Any], data: bytes) -> list[str]:
    """Load a snapshot's bytes into ``namespace`` as the kernel's restore does, with ``__main__`` being the
    module whose dictionary it is (functions defined in cells keep it as their globals)."""
    from IPython.core import interactiveshell

    if hasattr(interactiveshell, "make_main_module_type"):  # IPython 9: a module type over the namespace
        module = interactiveshell.make_main_module_type(namespace)()
    else:  # IPython 8
        module = interactiveshell.DummyMod()
        module.__dict__ = namespace
    sys.modules["__main__"] = module
    _adopt_main_module()
    import dill

    state = dill.loads(data)
    if not isinstance(state, dict):
        raise ValueError(f"the snapshot holds a {type(state).__name__}, not a namespace")
    helper = sys.modules[HELPER_MODULE]  # the display options, as the helper's restore sets them
    helper.set_display_options(state.pop(helper.OPTIONS_KEY, {}))
    namespace.update(state)
    return sorted(state)


def _kernel_imports(folder: str) -> dict[str, list[Any]]:
    """The modules a kernel imports and the regular expressions it compiles as it starts, found by starting
    one in a throwaway child (on a connection file of its own, in ``folder``) that reports them and exits:
    the template imports and compiles them once (``modules``; ``patterns``: pattern and flags)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            _redirect_output(os.path.join(folder, "probe.log"))
            connection_file = os.path.join(folder, "probe.json")
            ports = {f"{name}_port": i + 1 for i, name in enumerate(("shell", "iopub", "stdin", "control", "hb"))}
            info = {"transport": "ipc", "ip": os.path.join(folder, "probe"), "key": "", **ports}
            with open(connection_file, "w") as f:
                json.dump({**info, "signature_scheme": "hmac-sha256", "kernel_name": ""}, f)
            before = set(sys.modules)
            from ipykernel.kernelapp import IPKernelApp

            IPKernelApp.instance().initialize(["-f", connection_file, *KERNEL_ARGS])
            import re

            names = [name for name in sys.modules if name not in before]
            patterns = [[key[1], int(key[2])] for key in list(re._cache) if key[0] is str]  # type: ignore[attr-defined]
            os.write(write_end, json.dumps({"modules": names, "patterns": patterns}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    data = b""
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    for name in os.listdir(folder):
        if name.startswith("probe"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
    return json.loads(data) if data else {}


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


def _adopt_main_module() -> None:
    """dill binds ``__main__`` when it is first imported: point it at the current one (the user module)."""
    dill_module = sys.modules.get("dill._dill")
    if dill_module is not None:
        dill_module._main_module = sys.modules["__main__"]


def _redirect_output(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


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
        connection.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        connection.sendall(payload)


def _install_helper(path: str) -> None:
    """The in-kernel helper, installed as the host installs it in a started kernel."""
    with open(path) as f:
        source = f.read()
    module = types.ModuleType(HELPER_MODULE)
    exec(compile(source, "<themisto-helper>", "exec"), module.__dict__)
    module.SOURCE = source
    sys.modules[HELPER_MODULE] = module


def main() -> None:
    """``python zygote.py CONFIG_JSON``: import, freeze, serve. CONFIG: ``socket``, ``preload`` (module
    names), ``helper`` (the helper's source file), ``environment`` (variables to set)."""
    config = json.loads(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.update(config.get("environment", {}))
    import dill  # noqa: F401 - snapshots load in the template (derive)
    import ipykernel.ipkernel
    import ipykernel.kernelapp  # noqa: F401
    import IPython.core.interactiveshell  # noqa: F401

    _install_helper(config["helper"])
    for name in config.get("preload", []):
        with contextlib.suppress(BaseException):
            importlib.import_module(name)
    import re

    warm = _kernel_imports(os.path.dirname(config["socket"]))
    for name in warm.get("modules", []):
        with contextlib.suppress(BaseException):
            importlib.import_module(name)
    for pattern, flags in warm.get("patterns", []):
        with contextlib.suppress(BaseException):
            re.compile(pattern, flags)
    _name_process("themisto-tmpl")
    template = Template(config["socket"], parent=os.getppid())
    template.app = _prebuild(None)
    gc.collect()
    gc.freeze()
    print("ready", flush=True)
    template.serve()


if __name__ == "__main__":
    main()
