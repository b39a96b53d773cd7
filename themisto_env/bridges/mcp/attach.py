"""Attach mode (``themisto mcp --attach CONNECTION_FILE``): the read-only state tools on a running Jupyter
kernel, such as a user's own notebook's. No episode, no target, no tool that runs code.

The tools reach the kernel through the in-kernel helper, as the env's do: every call is a silent execute
request with the work in ``user_expressions`` (``store_history=False``), so the user's namespace, ``_``,
``Out``, ``In`` and the execution counter stay as they were. The helper is added to the kernel's
``sys.modules`` only (under ``_themisto_helper``); unlike a sandbox kernel, the attached one is never
changed otherwise (its cell names and builtins are left alone), never interrupted and never restarted: a
call that runs past the time limit is an infrastructure fault, the kernel is left to its work.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jupyter_client.blocking import BlockingKernelClient

from themisto_env.bridges.mcp.server import Sessions, build_server
from themisto_env.bridges.mcp.session import Answer
from themisto_env.bridges.mcp.tools import attach_tools
from themisto_env.env.tools import TOOLS, ToolCall, ToolContext, run_tool
from themisto_env.errors import ConfigError, InfrastructureError, KernelStartError
from themisto_env.sandbox.kernel.introspection import KernelIntrospection
from themisto_env.sandbox.kernel.messaging import KernelMessaging, client_context
from themisto_env.sandbox.kernel.process import bind_thread_loop
from themisto_env.sandbox.models import SandboxLimits

__all__ = ["AttachedKernel", "AttachedSession", "attached_server", "read_connection_file"]

#: The tools attach mode offers: the read-only ones that need only the kernel (not those that read the env's
#: recorded history, which an attached kernel does not have).
ATTACH_TOOLS = tuple(tool.name for tool in attach_tools() if not TOOLS[tool.name].reads_history)


def read_connection_file(path: Path) -> dict[str, Any]:
    """A kernel's connection info (``%connect_info`` names the file; ``jupyter --runtime-dir`` holds them).

    Raises:
        ConfigError: The file is missing or is not a kernel's connection file.
    """
    try:
        info = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--attach {path}: not a readable kernel connection file ({exc})") from None
    if not isinstance(info, dict) or "shell_port" not in info or "key" not in info:
        raise ConfigError(f"--attach {path}: not a kernel connection file (no shell_port or key)")
    return info


class _Launcher:
    """The attached kernel's process is not ours: alive as far as we know, never interrupted."""

    helper_installed = False

    def is_alive(self) -> bool:
        return True

    def interrupt(self) -> None:
        """Nothing: an interrupt would stop the user's own cell."""

    def exit_reason(self) -> str:
        return "not ours to watch"

    def memory_bytes(self) -> int | None:
        return None


class _Process:
    """What `KernelMessaging` reads of a kernel's process, for a kernel somebody else started."""

    backend = "attached"
    started = True

    def __init__(self, connection: dict[str, Any], path: Path) -> None:
        self.connection = connection
        self.run_dir = path.parent
        self.limits = SandboxLimits()
        self.launcher = _Launcher()

    def relaunch(self) -> None:
        raise InfrastructureError("the attached kernel did not answer in time; it is never restarted from here")


class _AttachedMessaging(KernelMessaging):
    """`KernelMessaging` to a kernel it did not start: connects, installs the helper module only, and
    never interrupts or restarts it."""

    def connect(self) -> None:
        bind_thread_loop()
        client = BlockingKernelClient(context=client_context())
        self._client = client
        client.load_connection_info(self.process.connection)
        client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
        try:
            client.wait_for_ready(timeout=self.process.limits.start_timeout_s)
        except RuntimeError as exc:
            raise KernelStartError(f"the kernel of the connection file did not answer: {exc}") from None
        self._drain_iopub(wait_s=0.01)
        self.install_helper(setup=False)

    def run(self, code: str, **options: Any) -> tuple[dict[str, Any], list[dict[str, Any]], bool, bool, bool]:
        return super().run(code, **{**options, "interrupt": False})


class AttachedKernel:
    """A running kernel reached through its connection file: its `introspect` answers the tools, one call at
    a time (the sessions share it).

    Raises:
        ConfigError: Not a connection file.
        KernelStartError: The kernel did not answer.
    """

    def __init__(self, connection_file: Path) -> None:
        path = Path(connection_file)
        self.messaging = _AttachedMessaging(_Process(read_connection_file(path), path))  # type: ignore[arg-type]
        self.messaging.connect()
        self.introspect = KernelIntrospection(self.messaging)
        self.lock = threading.Lock()

    def close(self) -> None:
        """Disconnect (the kernel runs on)."""
        self.messaging.disconnect()


class AttachedSession:
    """One MCP session on an attached kernel: the read-only tools (`ATTACH_TOOLS`), no episode."""

    def __init__(self, kernel: AttachedKernel, *, max_chars: int = 3000) -> None:
        self.kernel = kernel
        self.context = ToolContext(kernel=kernel, max_chars=max_chars)  # type: ignore[arg-type]

    def call(self, name: str, arguments: Mapping[str, Any] | None) -> Answer:
        if name not in ATTACH_TOOLS:
            text = f"Error: attach mode has the read-only state tools only: {', '.join(ATTACH_TOOLS)}."
            return Answer(text, {"tool": name, "ok": False, "text": text, "error": text[7:]}, error=True)
        with self.kernel.lock:
            result = run_tool(ToolCall(tool=name, args=dict(arguments or {})), self.context)
        return Answer(result.text, asdict(result), error=not result.ok)

    def prompt_text(self) -> str:
        return "Attached to a running Jupyter kernel: query its state with the read-only tools (no sample)."

    def close(self) -> None:
        """Nothing: the kernel is shared by the sessions and is not ours."""


def attached_server(connection_file: Path, *, http: bool = False, workers: int = 8) -> tuple[Any, Sessions]:
    """The MCP server of attach mode on the kernel of ``connection_file`` and its sessions."""
    kernel = AttachedKernel(connection_file)
    sessions = Sessions(lambda: AttachedSession(kernel), workers=workers)
    tools = [tool for tool in attach_tools() if tool.name in ATTACH_TOOLS]
    server = build_server(sessions, lambda: tools, name="themisto-attach", handshake_only=http)
    return server, sessions
