"""Record your own Jupyter work as a JuNE event log: ``%load_ext themisto_env.data.recorder``.

Once loaded in a kernel, every cell a person runs is appended to a JSON Lines log as JuNE rows with its
outputs as nbformat outputs, readable by [`read_sessions`][themisto_env.data.read_sessions] and built like any
JuNE log (docs/data.md, "Recording your own session"). Outputs are captured beside the notebook's own
display, never instead of it, and writing the log never breaks a cell. This module hooks the capture
(`themisto_env.data.recorder_capture`) and the locked appends (`themisto_env.data.recorder_log`) into the
shell.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import sys
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from themisto_env.data.recorder_capture import CellCapture, TeeStream, jsonable, message_id
from themisto_env.data.recorder_log import RecordingLog
from themisto_env.sandbox.outputs import OUTPUT_MESSAGES

ENV_RECORD_PATH = "THEMISTO_RECORD_PATH"
ENV_USER_ID = "THEMISTO_USER_ID"
ENV_EXPERT = "THEMISTO_EXPERT"

_recorder: Recorder | None = None


def default_record_path() -> Path:
    """Where the log goes: ``$THEMISTO_RECORD_PATH``, else a file in the user's data directory.

    Returns:
        The log's path (``.jsonl``).
    """
    if os.environ.get(ENV_RECORD_PATH):
        return Path(os.environ[ENV_RECORD_PATH]).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("themisto-env")) / "recordings" / "june_log.jsonl"


class Recorder:
    """Appends JuNE rows for each cell a person runs in this IPython shell.

    Args:
        shell: The IPython shell (``get_ipython()``).
        path: The JSON Lines log to append to.
        user_id: JuNE ``user_id``; default ``$THEMISTO_USER_ID`` or the login name.
        expert: JuNE ``expert``; default ``$THEMISTO_EXPERT``.
    """

    def __init__(
        self,
        shell: Any,
        path: Path,
        *,
        user_id: str | None = None,
        expert: bool | None = None,
    ) -> None:
        self.shell = shell
        self.path = path
        self.user_id = user_id or os.environ.get(ENV_USER_ID) or _login_name()
        self.expert = expert if expert is not None else os.environ.get(ENV_EXPERT, "").lower() in ("1", "true", "yes")
        self.kernel_id = _kernel_id()
        self.log = RecordingLog(path)
        self._capture: CellCapture | None = None
        self._cell: dict[str, Any] = {}
        self._originals: dict[str, Any] = {}
        self._streams: dict[str, TextIO] = {}
        self._write_failed = False
        self._mode = "hooks"
        self._request_id: str | None = None
        self._muted = 0

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Hook into the shell and write a ``kernel_restarting`` row if this kernel was recorded before."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.log.kernel_seen_in_another_process(self.kernel_id):
            self._append([self._row("kernel_restarting")])
        events = self.shell.events
        events.register("pre_run_cell", self._pre_run_cell)
        events.register("post_run_cell", self._post_run_cell)
        session = getattr(getattr(self.shell, "kernel", None), "session", None)
        if session is not None and callable(getattr(session, "send", None)):
            # In a kernel: see exactly the messages the notebook receives for the cell.
            self._mode = "messages"
            self._wrap(session, "send", self._on_send)
        else:
            # A terminal IPython: tee the streams, wrap the display machinery.
            self._mode = "hooks"
            self._wrap(self.shell.display_pub, "publish", self._publish, mute=True)
            self._wrap(self.shell.display_pub, "clear_output", self._clear_output, mute=True)
            self._wrap(self.shell.displayhook, "start_displayhook", self._mute)
            self._wrap(self.shell.displayhook, "write_format_data", self._write_format_data, mute=True)
            self._wrap(self.shell.displayhook, "finish_displayhook", self._unmute, after=True)
            self._wrap(self.shell, "_showtraceback", self._showtraceback, mute=True)

    def stop(self) -> None:
        """Unhook everything; the shell behaves as if the extension had never been loaded.

        A cell running while the extension is unloaded (the ``%unload_ext`` cell itself) is finished in
        the log with the outputs it had so far.
        """
        if self._capture is not None:
            self._post_run_cell(None)
        events = self.shell.events
        with contextlib.suppress(ValueError):
            events.unregister("pre_run_cell", self._pre_run_cell)
        with contextlib.suppress(ValueError):
            events.unregister("post_run_cell", self._post_run_cell)
        self._restore_streams()
        for key, (owner, name, had_own) in list(self._originals.items()):
            if had_own is not None:
                setattr(owner, name, had_own)
            else:
                with contextlib.suppress(AttributeError):
                    delattr(owner, name)
            del self._originals[key]
        self._capture = None

    def _wrap(self, owner: Any, name: str, hook: Any, *, mute: bool = False, after: bool = False) -> None:
        """Replace ``owner.name`` by a wrapper calling ``hook`` with the same arguments while a cell is
        captured; with ``mute``, what the original writes to the teed streams is not captured (the
        terminal's display machinery prints what it displays)."""
        original = getattr(owner, name)
        own = owner.__dict__.get(name) if hasattr(owner, "__dict__") else None

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self._capture is not None and not after:
                with contextlib.suppress(Exception):
                    hook(*args, **kwargs)
            if mute:
                self._muted += 1
            try:
                return original(*args, **kwargs)
            finally:
                if mute:
                    self._muted -= 1
                if self._capture is not None and after:
                    with contextlib.suppress(Exception):
                        hook(*args, **kwargs)

        setattr(owner, name, wrapper)
        self._originals[f"{id(owner)}.{name}"] = (owner, name, own)

    def _mute(self, *args: Any, **kwargs: Any) -> None:
        self._muted += 1

    def _unmute(self, *args: Any, **kwargs: Any) -> None:
        self._muted = max(0, self._muted - 1)

    # -- hooks -------------------------------------------------------------------------------------

    def _on_send(
        self, stream: Any, msg_or_type: Any, content: Any = None, parent: Any = None, *args: Any, **kw: Any
    ) -> None:
        capture = self._capture
        assert capture is not None
        if isinstance(msg_or_type, dict):
            kind = msg_or_type.get("msg_type") or msg_or_type.get("header", {}).get("msg_type")
            content = msg_or_type.get("content")
            parent = msg_or_type.get("parent_header")
        else:
            kind = msg_or_type
        if kind not in OUTPUT_MESSAGES or not isinstance(content, dict):
            return
        if message_id(parent) != self._request_id:
            return
        capture.add(kind, jsonable(content))

    def _publish(self, data: dict[str, Any], metadata: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> None:
        assert self._capture is not None
        self._capture.display(data, metadata, kwargs.get("transient"), bool(kwargs.get("update", False)))

    def _clear_output(self, wait: bool = False) -> None:
        assert self._capture is not None
        self._capture.clear(wait)

    def _write_format_data(self, format_dict: dict[str, Any], md_dict: dict[str, Any] | None = None) -> None:
        assert self._capture is not None
        self._capture.result(format_dict, md_dict)

    def _showtraceback(self, etype: type, evalue: BaseException, stb: list[str]) -> None:
        assert self._capture is not None
        self._capture.error(str(etype.__name__), str(evalue), stb)

    def _pre_run_cell(self, info: Any) -> None:
        if getattr(info, "silent", False) or not getattr(info, "store_history", True):
            return
        source = info.raw_cell or ""
        self._cell = {"cell_index": getattr(info, "cell_id", None) or None, "cell_source": source}
        self._capture = CellCapture(self.shell.execution_count)
        self._request_id = message_id(getattr(self.shell, "parent_header", None))
        self._append([self._row("execute", **self._cell)])
        if self._mode == "messages":
            return
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            self._streams[name] = stream
            setattr(sys, name, TeeStream(stream, lambda text, n=name, c=self._capture: self._on_stream(c, n, text)))

    def _on_stream(self, capture: CellCapture, name: str, text: str) -> None:
        if not self._muted:
            capture.stream(name, text)

    def _post_run_cell(self, result: Any) -> None:
        capture = self._capture
        if capture is None:
            return
        if self._mode == "messages":
            for stream in (sys.stdout, sys.stderr):  # the kernel flushes after this hook: flush now
                with contextlib.suppress(Exception):
                    stream.flush()
        self._restore_streams()
        self._capture = None
        self._muted = 0
        outputs = capture.final()
        exc = getattr(result, "error_before_exec", None) or getattr(result, "error_in_exec", None)
        errors = [o for o in outputs if o["output_type"] == "error"]
        if exc is not None and not errors:
            errors = [{"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc), "traceback": []}]
            outputs.append(errors[0])
        rows = []
        if errors:
            rows.append(self._row("error", cell_output=errors, **self._cell))
        rows.append(self._row("finished_execute", cell_output=outputs, **self._cell))
        self._append(rows)

    def _restore_streams(self) -> None:
        for name, stream in self._streams.items():
            if isinstance(getattr(sys, name), TeeStream):
                setattr(sys, name, stream)
        self._streams.clear()

    # -- the log -----------------------------------------------------------------------------------

    def _row(self, event: str, **fields: Any) -> dict[str, Any]:
        parent = getattr(self.shell, "parent_header", None) or {}
        session_id = parent.get("header", {}).get("session") if isinstance(parent, dict) else None
        row = {
            "time": datetime.now(),
            "session_id": session_id,
            "kernel_id": self.kernel_id,
            "notebook_name": _notebook_name(self.shell),
            "event": event,
            "cell_type": "code" if "cell_source" in fields else None,
            "user_id": self.user_id,
            "expert": self.expert,
        }
        row.update(fields)
        return row

    def _append(self, rows: list[dict[str, Any]]) -> None:
        try:
            self.log.append(rows, kernel_id=self.kernel_id)
        except Exception as exc:  # recording must never break the user's cell
            if not self._write_failed:
                self._write_failed = True
                stream = self._streams.get("stderr", sys.__stderr__)
                if stream is not None:
                    print(f"themisto recorder: cannot write {self.path}: {exc}", file=stream)


def _kernel_id() -> str:
    with contextlib.suppress(Exception):
        from ipykernel.connect import get_connection_file

        name = Path(get_connection_file()).stem
        if name.startswith("kernel-"):
            return name.removeprefix("kernel-")
    return str(uuid.uuid4())


def _notebook_name(shell: Any) -> str | None:
    user_ns = getattr(shell, "user_ns", {})
    for candidate in (os.environ.get("JPY_SESSION_NAME"), user_ns.get("__vsc_ipynb_file__")):
        if candidate:
            return Path(str(candidate)).name
    return None


def _login_name() -> str | None:
    try:
        return getpass.getuser()
    except Exception:
        return None


def load_ipython_extension(ipython: Any) -> None:
    """Start recording this shell's executions (``%load_ext themisto_env.data.recorder``).

    Args:
        ipython: The shell IPython passes in.
    """
    global _recorder
    if _recorder is not None and _recorder.shell is ipython:
        print(f"themisto recorder: already recording to {_recorder.path}")
        return
    if _recorder is not None:
        _recorder.stop()
    recorder = Recorder(ipython, default_record_path())
    recorder.start()
    _recorder = recorder
    print(f"themisto recorder: recording executions to {recorder.path}")


def unload_ipython_extension(ipython: Any) -> None:
    """Stop recording (``%unload_ext themisto_env.data.recorder``).

    Args:
        ipython: The shell IPython passes in.
    """
    global _recorder
    if _recorder is not None:
        _recorder.stop()
        path = _recorder.path
        _recorder = None
        print(f"themisto recorder: stopped; the log is {path}")


__all__ = [
    "ENV_EXPERT",
    "ENV_RECORD_PATH",
    "ENV_USER_ID",
    "Recorder",
    "default_record_path",
    "load_ipython_extension",
    "unload_ipython_extension",
]
