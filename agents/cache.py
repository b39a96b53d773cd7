"""A response cache for the LLM agents: one SQLite file, so that a rerun is reproducible and free.

``LLMAgent(..., cache="replies.sqlite")`` looks every model call up before making it: a hit replays the
stored reply without a request, a miss makes the call and stores the reply. The key (`request_key`) covers
everything that changes the answer and nothing that only says where or how to ask; only its hash is stored.
Caching at `call_model`, the one place every model call goes through, rather than langchain-core's
``BaseCache``, keeps keys stable across timeouts, proxies and random tool-call ids, and lets the agent count
a hit as free (``cached_calls`` in [`AgentUsage`][themisto_env.agents.AgentUsage]).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from themisto_env.errors import DataError

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

FORMAT = "themisto-response-cache"
VERSION = 1
"""The file format's version; a file of another version is refused (its keys would not match)."""

KEY_VERSION = 1
"""Part of every key: bumping it retires every stored entry at once (when the key material changes)."""

CACHED = "themisto_cached"
"""The ``response_metadata`` flag of a reply replayed from the cache (see `is_cached`)."""

NOT_THE_ANSWER = re.compile(
    r"key|secret|password|credential|auth|token$|url|api_base|endpoint|host|organi[sz]ation|project|header"
    r"|client|proxy|timeout|retries|^stream|verbose|callbacks|tags|metadata|rate_limiter",
    re.IGNORECASE,
)
"""Invocation parameters left out of the key: secrets and where or how to ask, never what is asked."""

BUSY_TIMEOUT = 30.0
"""Seconds a writer waits for another one before the cache gives up (with a DataError)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    message TEXT NOT NULL,
    input_tokens INTEGER,
    output_tokens INTEGER,
    created REAL NOT NULL
);
"""


def is_cached(message: Any) -> bool:
    """Whether a reply was replayed from a `ResponseCache` (rather than made by the model)."""
    metadata = getattr(message, "response_metadata", None)
    return isinstance(metadata, Mapping) and bool(metadata.get(CACHED))


# -- the key ------------------------------------------------------------------------------------------


def _unwrap(model: Any) -> tuple[Any, dict[str, Any]]:
    """The chat model under ``bind_tools``/``bind`` bindings, and what the bindings add to each call."""
    bound: dict[str, Any] = {}
    while hasattr(model, "bound") and isinstance(getattr(model, "kwargs", None), Mapping):
        bound = {**dict(model.kwargs), **bound}
        model = model.bound
    return model, bound


def _plain(value: Any) -> Any:
    """A JSON-able, deterministic form of a parameter value (secrets dropped, addresses stripped)."""
    from pydantic import BaseModel, SecretBytes, SecretStr

    if isinstance(value, (SecretStr, SecretBytes)):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, BaseModel):
        return _plain(value.model_dump(mode="json"))
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


def model_parameters(model: Any) -> dict[str, Any]:
    """What of a (possibly bound) chat model changes its answer: provider, parameters, bound tools.

    Args:
        model: A langchain-core chat model, or a binding of one (``bind_tools``).

    Returns:
        ``{"provider", "model", "parameters", "bound"}``, JSON-able and free of secrets.
    """
    base, bound = _unwrap(model)
    try:
        params = dict(base._get_invocation_params(stop=None))
    except (AttributeError, TypeError):
        params = dict(getattr(base, "_identifying_params", {}) or {})
    provider = str(getattr(base, "_llm_type", "") or f"{type(base).__module__}.{type(base).__qualname__}")
    name = params.get("model") or params.get("model_name") or getattr(base, "model_name", None)
    name = name or getattr(base, "model", None)
    return {
        "provider": provider,
        "model": str(name or ""),
        "parameters": _plain({k: v for k, v in params.items() if not NOT_THE_ANSWER.search(str(k))}),
        "bound": _plain(bound),
    }


def _message(message: BaseMessage, ids: dict[str, str]) -> dict[str, Any]:
    def renumber(call_id: Any) -> Any:
        if not call_id:
            return call_id
        return ids.setdefault(str(call_id), f"id{len(ids)}")

    entry: dict[str, Any] = {"type": message.type, "content": _plain(message.content)}
    if getattr(message, "name", None):
        entry["name"] = message.name
    calls = getattr(message, "tool_calls", None)
    if calls:
        entry["tool_calls"] = [
            {"name": c.get("name"), "args": _plain(c.get("args")), "id": renumber(c.get("id"))} for c in calls
        ]
    invalid = getattr(message, "invalid_tool_calls", None)
    if invalid:
        entry["invalid_tool_calls"] = [
            {"name": c.get("name"), "args": c.get("args"), "id": renumber(c.get("id")), "error": c.get("error")}
            for c in invalid
        ]
    if message.type == "tool":
        entry["tool_call_id"] = renumber(getattr(message, "tool_call_id", None))
        entry["status"] = getattr(message, "status", "success")
    return entry


def request_material(model: Any, messages: Sequence[BaseMessage], *, draw: int = 0) -> dict[str, Any]:
    """The canonical description of a model call that `request_key` hashes (see the module doc)."""
    ids: dict[str, str] = {}
    return {
        "key_version": KEY_VERSION,
        **model_parameters(model),
        "messages": [_message(m, ids) for m in messages],
        "draw": int(draw),
    }


def request_key(model: Any, messages: Sequence[BaseMessage], *, draw: int = 0) -> str:
    """The cache key of a model call: the SHA-256 (hex) of `request_material` as canonical JSON.

    The material is everything that changes the answer: the provider (the chat model's ``_llm_type``), the
    model's invocation parameters without what only says where or how to ask (keys and secrets, base URLs,
    organisation, headers, clients, timeouts, retries, streaming: `NOT_THE_ANSWER`; so a different endpoint
    serving the same model name also hits: use one file per deployment if the name is ambiguous), what is
    bound to the model (tools, ``tool_choice``), the full message list with tool-call ids renumbered in order
    of first appearance (message ids, ``response_metadata`` and ``additional_kwargs`` left out), and the draw
    (each of the K predictions of pass@k is its own entry).

    Args:
        model: The chat model (or binding) about to be called.
        messages: The messages it is about to be given.
        draw: Which independent prediction of the same sample this is (pass@k), 0 for the first.
    """
    material = request_material(model, messages, draw=draw)
    text = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- the file -----------------------------------------------------------------------------------------


def _busy(exc: BaseException) -> bool:
    """Whether SQLite refused because another connection holds the file for a moment."""
    return isinstance(exc, sqlite3.OperationalError) and any(w in str(exc) for w in ("locked", "busy"))


class ResponseCache:
    """Model replies in one SQLite file, shared safely by threads, async tasks and processes.

    WAL mode with a busy timeout: readers never block, writers queue. Each reply is one transaction
    (``INSERT OR IGNORE``: when two workers store the same key, the first answer stays), and a writer killed
    mid-run leaves the file consistent.

    Args:
        path: The file (created, with its folder, when missing).

    Raises:
        DataError: The file exists but is not a readable response cache (one line, naming it).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._connection()  # a bad file fails here, when the agent is made, not at its first call

    # -- pickling (worker processes get the path, and open their own connection) -------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"

    def _error(self, exc: BaseException) -> DataError:
        what = " ".join(str(exc).split()) or type(exc).__name__
        return DataError(
            f"not a readable response cache ({what}): delete it or give another cache file", path=self.path
        )

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        self._conn = None  # a forked child never uses its parent's connection
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._error(exc) from None
        deadline = time.monotonic() + BUSY_TIMEOUT
        while True:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, check_same_thread=False, isolation_level=None)
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")  # in WAL: durable across a process crash
                self._check_format(conn)
                break
            except (sqlite3.Error, DataError) as exc:
                conn.close()
                # SQLite answers "locked" at once, without its busy handler, while another process switches a
                # new file to WAL: that is a wait, not a bad file
                if _busy(exc) and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                raise (exc if isinstance(exc, DataError) else self._error(exc)) from None
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _check_format(self, conn: sqlite3.Connection) -> None:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:  # a new file: its schema, in one transaction (two workers may race to make it)
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?), ('version', ?)", (FORMAT, VERSION))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            tables = {"meta", "replies"}
        meta = dict(conn.execute("SELECT name, value FROM meta")) if "meta" in tables else {}
        if meta.get("format") != FORMAT or "replies" not in tables:
            raise DataError(
                "an SQLite file that is not a themisto response cache: give another cache file", path=self.path
            )
        if str(meta.get("version")) != str(VERSION):
            raise DataError(
                f"a response cache of format version {meta.get('version')} (this themisto-env reads {VERSION}): "
                "delete it or give another cache file",
                path=self.path,
            )

    # -- reading and writing ---------------------------------------------------------------------------

    def get(self, key: str) -> BaseMessage | None:
        """The stored reply for a key (flagged by `is_cached`), or None."""
        from langchain_core.messages import messages_from_dict

        try:
            with self._lock:
                row = self._connection().execute("SELECT message FROM replies WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            message = messages_from_dict([json.loads(row[0])])[0]
        except (sqlite3.Error, ValueError, KeyError, TypeError) as exc:  # or a row that is not a serialised message
            raise self._error(exc) from None
        message.response_metadata = {**message.response_metadata, CACHED: True}
        return message

    def put(self, key: str, message: BaseMessage, *, provider: str = "", model: str = "") -> None:
        """Store a reply under a key (the first reply stored for a key stays).

        Args:
            key: From `request_key`.
            message: The model's reply.
            provider: The provider, for people reading the file (not part of the key here).
            model: The model name, likewise.
        """
        from langchain_core.messages import message_to_dict

        usage = getattr(message, "usage_metadata", None) or {}
        data = json.dumps(message_to_dict(message), ensure_ascii=False, default=str)
        row = (key, provider, model, data, usage.get("input_tokens"), usage.get("output_tokens"), time.time())
        try:
            with self._lock:
                self._connection().execute("INSERT OR IGNORE INTO replies VALUES (?, ?, ?, ?, ?, ?, ?)", row)
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def __len__(self) -> int:
        try:
            with self._lock:
                return int(self._connection().execute("SELECT count(*) FROM replies").fetchone()[0])
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def close(self) -> None:
        """Close this process's connection (the cache reopens it if used again)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


__all__ = [
    "CACHED",
    "NOT_THE_ANSWER",
    "ResponseCache",
    "is_cached",
    "model_parameters",
    "request_key",
    "request_material",
]
