"""A kernel's messaging: execute requests, replies, output collection, timeouts and helper calls.

`KernelMessaging` speaks the Jupyter messaging protocol (jupyter_client over IPC sockets in the
kernel's run directory) to the process that `KernelProcess`
started. While it waits for a reply it checks that the process is alive, so a kernel that dies (a
segfault, ``os._exit``, the OOM killer, a removed container) raises
[`KernelDiedError`][themisto_env.errors.KernelDiedError] within a second instead of hanging. A cell that runs past its
timeout is interrupted, and the kernel restarted if it does not come back.

On connecting it installs the in-kernel helper (`themisto_env.sandbox.kernel.helper`) under
`HELPER_MODULE`; `KernelMessaging.call` runs its functions without touching the user's state.
"""

from __future__ import annotations

import ast
import json
import os
import queue
import resource
import threading
import time
from typing import Any

import zmq
from jupyter_client.blocking import BlockingKernelClient

from themisto_env import tracing
from themisto_env.errors import (
    HelperError,
    InfrastructureError,
    IntrospectionRefused,
    KernelDiedError,
    KernelStartError,
    KernelTimeoutError,
    UnknownNameError,
)
from themisto_env.sandbox.compat.jupyter import opened_channels
from themisto_env.sandbox.kernel.helper import helper_source
from themisto_env.sandbox.kernel.process import KernelProcess, bind_thread_loop
from themisto_env.sandbox.models import ExecutionResult
from themisto_env.sandbox.outputs import OutputCollector

_POLL_S = 0.25  # how often a silent wait checks that the kernel is alive
#: At a kernel's start, how long its answered kernel_info's status may take on iopub before asking again.
READY_IOPUB_S = 0.01
#: At a kernel's start, the silence on iopub that ends dropping what it published before.
DRAIN_S = 0.002
#: The name the in-kernel helper module is installed under (in the kernel's ``sys.modules``).
HELPER_MODULE = "_themisto_helper"


def helper_expression(function: str, kwargs: dict[str, Any]) -> str:
    """The user expression that calls a helper function (see `kernel_helper.call`)."""
    return f"__import__('sys').modules[{HELPER_MODULE!r}].call({function!r}, {json.dumps(kwargs)!r})"


def helper_value(function: str, value: dict[str, Any]) -> Any:
    """The value of a helper call from its user-expression result.

    Raises:
        UnknownNameError: The helper was asked about a name the user did not define.
        IntrospectionRefused: The helper declined (the variable is not of the kind asked for).
        HelperError: The helper function raised on the user's data.
        InfrastructureError: The expression itself failed (the helper is missing or broken).
    """
    if value.get("status") != "ok":
        raise InfrastructureError(f"kernel helper {function!r} failed: {value.get('ename')}: {value.get('evalue')}")
    payload = json.loads(ast.literal_eval(value["data"]["text/plain"]))
    if "refused" in payload:
        refused = payload["refused"]
        if refused.get("suggestions") is not None:
            raise UnknownNameError(
                function, refused["detail"], name=refused.get("name"), suggestions=tuple(refused["suggestions"])
            )
        raise IntrospectionRefused(function, refused["detail"], name=refused.get("name"))
    if "raised" in payload:
        raise HelperError(function, payload["raised"])
    return payload["ok"]


_CONTEXT: tuple[int, zmq.Context] | None = None  # (the pid it was made in, the context)
_CONTEXT_LOCK = threading.Lock()


def client_context() -> zmq.Context:
    """The process's one zmq context for its kernel clients (made on first use; a forked child makes its own).

    One context per kernel client costs two threads (its I/O thread and its reaper) and a few descriptors for
    every open kernel, idle or not: 500 served sessions held 1,000 threads for nothing. The shared context's
    socket limit follows the process's descriptor limit (zmq's default, 1,023, caps a process near 500
    kernels: two sockets each). Sockets are closed with their client (``linger=0``); the context lives as long
    as the process.
    """
    global _CONTEXT
    with _CONTEXT_LOCK:
        if _CONTEXT is None or _CONTEXT[0] != os.getpid() or _CONTEXT[1].closed:
            context = zmq.Context()
            context.setsockopt(zmq.RECONNECT_IVL, 10)  # a socket not bound yet is tried again after 10 ms, not 100
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            limit = 65536 if soft == resource.RLIM_INFINITY else soft
            context.set(zmq.MAX_SOCKETS, max(context.get(zmq.MAX_SOCKETS), min(limit, 65536)))
            _CONTEXT = (os.getpid(), context)
        return _CONTEXT[1]


def _fingerprint_value(value: dict[str, Any] | None) -> dict[str, str] | None:
    """A fingerprint that rode on an execute request, or None where it could not be taken (the caller
    then asks for it on its own, where a failure is reported properly)."""
    if not value:
        return None
    try:
        return dict(helper_value("namespace_fingerprint", value))
    except (HelperError, InfrastructureError):
        return None


class KernelMessaging:
    """A kernel's messaging: the Jupyter protocol spoken to the process of a `KernelProcess`.

    Args:
        process: The kernel's process part (its connection info, launcher and limits).
    """

    def __init__(self, process: KernelProcess) -> None:
        self.process = process
        self._client: BlockingKernelClient | None = None

    def connect(self) -> None:
        """Connect to the started process, wait until it answers, and install the in-kernel helper.

        Raises:
            KernelStartError: It did not answer within ``limits.start_timeout_s``, died meanwhile, or the
                helper could not be installed.
        """
        process, limits = self.process, self.process.limits
        bind_thread_loop()
        client = BlockingKernelClient(context=client_context())
        self._client = client  # set first: a failed start's close() closes its sockets
        client.load_connection_info(process.connection or {})
        try:
            client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
        except zmq.ZMQError as exc:  # e.g. an IPC path past the 107 bytes of a unix socket's name
            raise KernelStartError(
                f"could not connect to the {process.backend} kernel in {process.run_dir} ({exc}); a shorter "
                "TMPDIR helps when the path is too long"
            ) from None
        deadline = time.monotonic() + limits.start_timeout_s
        # a forked kernel binds its sockets within milliseconds: ask again soon rather than wait out a second
        attempt_s = 0.05 if getattr(process.launcher, "helper_installed", False) else 1.0
        while True:  # ready = a kernel_info reply on shell AND its status on iopub (no slow joiner)
            msg_id = client.kernel_info()
            try:
                self._wait_shell_reply(msg_id, deadline=time.monotonic() + attempt_s, during="start")
                # the kernel answered: its status follows on iopub within a millisecond, unless this client's
                # subscription reached it too late (a slow joiner), where asking again soon costs less
                if self._seen_on_iopub(msg_id, deadline=time.monotonic() + min(attempt_s, READY_IOPUB_S)):
                    break
                raise _Silent
            except _Silent:
                if time.monotonic() > deadline:
                    raise KernelStartError(
                        f"the {process.backend} kernel did not answer within {limits.start_timeout_s:g} s"
                    ) from None
            except KernelDiedError as exc:
                raise KernelStartError(str(exc)) from exc
        self._drain_iopub(wait_s=DRAIN_S)
        if not getattr(process.launcher, "helper_installed", False):  # a forked kernel: its template installed it
            self.install_helper()

    def install_helper(self, *, setup: bool = True) -> None:
        """Install the in-kernel helper module under `HELPER_MODULE`; with ``setup``, run its ``install`` too
        (outside a cell, by design). A kernel attached to, not started, is not set up.

        Raises:
            KernelStartError: The helper could not be installed.
        """
        timeout_s = self.process.limits.start_timeout_s
        source = helper_source()
        module = (
            f"__import__('sys').modules.setdefault({HELPER_MODULE!r}, "
            f"__import__('types').ModuleType({HELPER_MODULE!r}))"
        )
        code = (
            f"exec(compile({source!r}, '<themisto-helper>', 'exec'), {module}.__dict__)\n"
            f"{module}.SOURCE = {source!r}"  # seal() compiles private copies from it
        )
        result = self.run(code, silent=True, store_history=False, timeout_s=timeout_s)
        if result[0].get("status") != "ok":
            raise KernelStartError(f"could not install the introspection helper: {result[0]}")
        if setup:
            try:
                self.call("install", timeout_s=timeout_s)
            except (HelperError, InfrastructureError) as exc:
                raise KernelStartError(f"could not install the introspection helper: {exc}") from exc

    def disconnect(self) -> None:
        """Stop the client's channels, if connected: their sockets close now (``linger=0``), in order,
        rather than in the client's ``__del__``; the process's shared context (`client_context`) stays.
        """
        client = self._client
        if client is not None:
            self._client = None
            _close_channels(client)

    def restart(self) -> None:
        """Kill the kernel process, start a fresh one and connect to it (the user's state is gone)."""
        self.disconnect()
        self.process.relaunch()
        self.connect()

    # -- execution -------------------------------------------------------------------------------------

    def execute(
        self, code: str, *, timeout_s: float | None = None, fingerprint: bool = False, interrupt: bool = True
    ) -> ExecutionResult:
        """Run a cell as a user would (stored in history, counted) and return what it produced.

        A cell that runs past the timeout is interrupted (status ``timeout``); if the kernel does not
        come back within the grace period it is restarted (``kernel_restarted``; the state is gone).
        Without ``interrupt`` (a kernel about to be discarded) the wait simply ends at the timeout,
        with status ``timeout``, and the kernel is left busy.
        With ``fingerprint``, the namespace fingerprint after a cell that did not raise comes back in the
        same request (``result.fingerprint``).

        Raises:
            KernelDiedError: The kernel process died while running the cell.
        """
        started = time.perf_counter()
        expressions = {"fp": helper_expression("namespace_fingerprint", {})} if fingerprint else None
        with tracing.span("themisto.kernel.execute", {"themisto.kernel.backend": self.process.backend}) as span:
            reply, outputs, timed_out, restarted, truncated = self.run(
                code,
                silent=False,
                store_history=True,
                timeout_s=timeout_s,
                user_expressions=expressions,
                interrupt=interrupt,
            )
            status = "timeout" if timed_out else ("error" if reply.get("status") == "error" else "ok")
            tracing.record(span, {"themisto.kernel.status": status, "themisto.kernel.restarted": restarted})
        duration = time.perf_counter() - started
        after = reply.get("user_expressions", {}).get("fp") if fingerprint and status == "ok" else None
        return ExecutionResult(
            status=status,
            outputs=outputs,
            execution_count=reply.get("execution_count"),
            duration_s=duration,
            memory_bytes=None if restarted else self.process.launcher.memory_bytes(),
            truncated=truncated,
            kernel_restarted=restarted,
            fingerprint=_fingerprint_value(after),
        )

    def call(self, function: str, *, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """Run a function of the in-kernel helper without touching the user's state; return its value.

        The call is a silent execution with the work done in ``user_expressions``: it changes neither the
        user namespace, nor ``_``/``Out``, nor the execution counter or history.

        This is the low-level escape hatch: the typed methods of the kernel's parts
        (``kernel.introspect.list_variables``, ``kernel.snapshots.save``, ...) call it and return models.

        Raises:
            UnknownNameError: The function was asked about a name the user did not define.
            IntrospectionRefused: The function declined (the variable is not of the kind asked for).
            HelperError: The function raised on the user's data, or ran past the time limit and was
                interrupted (the kernel is fine).
            KernelTimeoutError: It ran past the limit and the kernel had to be restarted (the state is gone).
            InfrastructureError: The helper could not be reached or run (the kernel is not fine).
        """
        expression = helper_expression(function, kwargs)
        with tracing.span("themisto.kernel.call", {"themisto.kernel.function": function}, errors=InfrastructureError):
            reply, _, timed_out, restarted, _ = self.run(
                "", silent=True, store_history=False, timeout_s=timeout_s, user_expressions={"r": expression}
            )
        if restarted:
            raise KernelTimeoutError(
                f"kernel helper {function!r} ran past the time limit and the {self.process.backend} kernel had to be "
                "restarted (its state is gone)"
            )
        value = reply.get("user_expressions", {}).get("r", {})
        if timed_out and value.get("status") != "ok":
            limit = timeout_s or self.process.limits.timeout_s
            raise HelperError(function, f"TimeoutError: it ran past {limit:g} s and was interrupted")
        return helper_value(function, value)

    # -- protocol ------------------------------------------------------------------------------------

    @property
    def _kc(self) -> BlockingKernelClient:
        if self._client is None:
            raise InfrastructureError("the kernel is not started (or was closed)")
        bind_thread_loop()
        return self._client

    def _died(self, during: str) -> KernelDiedError:
        process = self.process
        reason = process.launcher.exit_reason() if process.started else "closed"
        return KernelDiedError(f"the {process.backend} kernel died during {during} ({reason})")

    def _seen_on_iopub(self, msg_id: str, *, deadline: float) -> bool:
        while time.monotonic() < deadline:
            try:
                msg = self._kc.get_iopub_msg(timeout=max(0.0, min(deadline - time.monotonic(), _POLL_S)))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return True
        return False

    def _drain_iopub(self, *, wait_s: float) -> None:
        """Drop what the kernel published so far (each reader skips messages of other requests anyway)."""
        while True:
            try:
                self._kc.get_iopub_msg(timeout=wait_s)
            except queue.Empty:
                return

    def _wait_shell_reply(self, msg_id: str, *, deadline: float, during: str) -> dict[str, Any]:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Silent
            try:
                msg = self._kc.get_shell_msg(timeout=min(remaining, _POLL_S))
            except queue.Empty:
                if not self.process.launcher.is_alive():
                    raise self._died(during) from None
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return dict(msg["content"])

    def run(
        self,
        code: str,
        *,
        silent: bool,
        store_history: bool,
        timeout_s: float | None,
        user_expressions: dict[str, str] | None = None,
        interrupt: bool = True,
    ) -> tuple[dict[str, Any], list[dict[str, Any]], bool, bool, bool]:
        """Send one execute request; return (reply, outputs, timed_out, restarted, truncated).

        Past the timeout the kernel is interrupted (unless ``interrupt`` is false: the wait simply ends), and
        restarted if still busy after the interrupt's grace period."""
        limits = self.process.limits
        during = "an introspection call" if silent else "a cell execution"
        msg_id = self._kc.execute(
            code,
            silent=silent,
            store_history=store_history,
            user_expressions=user_expressions or {},
            allow_stdin=False,
            stop_on_error=False,
        )
        outputs = OutputCollector(limits.output_limit_bytes, images_limit=limits.image_limit_bytes)
        deadline = time.monotonic() + (timeout_s or limits.timeout_s)
        timed_out = False
        idle = False
        while not idle:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if not interrupt:  # the caller discards the kernel: no interrupt, no restart
                    return {"status": "error"}, outputs.finish(), True, False, outputs.truncated
                if timed_out:  # interrupted and still busy: the kernel is wedged
                    self.restart()
                    return {"status": "error"}, outputs.finish(), True, True, outputs.truncated
                timed_out = True
                self.process.launcher.interrupt()
                deadline = time.monotonic() + limits.interrupt_grace_s
                continue
            try:
                msg = self._kc.get_iopub_msg(timeout=min(remaining, _POLL_S))
            except queue.Empty:
                if not self.process.launcher.is_alive():
                    raise self._died(during) from None
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status":
                idle = msg["content"]["execution_state"] == "idle"
            else:
                outputs.add_message(msg)
        try:
            reply = self._wait_shell_reply(
                msg_id, deadline=time.monotonic() + max(limits.interrupt_grace_s, 5.0), during=during
            )
        except _Silent:
            raise KernelTimeoutError(f"the {self.process.backend} kernel went idle but sent no reply") from None
        return reply, outputs.finish(), timed_out, False, outputs.truncated


def _close_channels(client: BlockingKernelClient) -> None:
    """Close the sockets of the channels ``client`` opened (shell and iopub here). jupyter_client's
    ``stop_channels`` reads every channel's property, which *opens* the ones never used (stdin, control,
    heartbeat) just to find them not running: with a shared context those sockets would stay open."""
    channels = opened_channels(client)
    if channels is None:
        client.stop_channels()  # another jupyter_client layout: its own way
        return
    for channel in channels:
        channel.close()  # its socket, linger 0 (no channel here runs a thread: hb is never opened)


class _Silent(Exception):
    """No reply before the deadline (internal)."""
