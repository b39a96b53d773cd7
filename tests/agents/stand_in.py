"""A stand-in OpenAI-compatible server (``http.server`` in a thread on 127.0.0.1) for the real
langchain-openai client: ``POST /v1/chat/completions`` answered with scripted behaviours, one per request in
order (then a default): a chat completion (optionally late), an HTTP error with headers, a reply that is not
JSON, or a hang. The provider-error tests and the docs' examples (tests/test_docs_examples.py) run on it.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = "```python\ndf.shape\n```"


@dataclass
class Behaviour:
    """One answer of the stand-in server."""

    status: int = 200
    body: str | None = None  # None: a chat completion of ``text``
    text: str = REPLY
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (longer than the client timeout: a hang)
    echo_auth: bool = False  # append the request's Authorization header to the reply (a leaking proxy)


def ok(text: str = REPLY, delay: float = 0.0) -> Behaviour:
    return Behaviour(text=text, delay=delay)


def error(status: int, message: str = "server error", **headers: str) -> Behaviour:
    body = json.dumps({"error": {"message": message, "type": "error", "code": None}})
    return Behaviour(status=status, body=body, headers={k.replace("_", "-"): v for k, v in headers.items()})


class StandIn:
    """The scripted server: ``script`` is consumed in order, then ``default`` answers."""

    def __init__(self) -> None:
        self.script: deque[Behaviour] = deque()
        self.default = ok()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # each request's headers (lower-case names)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests served at once
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                request = json.loads(self.rfile.read(length) or b"{}")
                with stand_in.lock:
                    stand_in.requests.append(request)
                    stand_in.headers.append({k.lower(): v for k, v in self.headers.items()})
                    behaviour = stand_in.script.popleft() if stand_in.script else stand_in.default
                    stand_in.in_flight += 1
                    stand_in.max_in_flight = max(stand_in.max_in_flight, stand_in.in_flight)
                time.sleep(behaviour.delay)
                with stand_in.lock:
                    stand_in.in_flight -= 1
                text = behaviour.text
                if behaviour.echo_auth:
                    text += f"\n# {self.headers.get('authorization')}"
                body = behaviour.body if behaviour.body is not None else completion(text)
                data = body.encode()
                try:
                    self.send_response(behaviour.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for key, value in behaviour.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (a hang past its timeout)
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def play(self, *behaviours: Behaviour, default: Behaviour | None = None) -> None:
        self.script = deque(behaviours)
        self.requests.clear()
        self.headers.clear()
        self.max_in_flight = 0
        if default is not None:
            self.default = default

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def completion(text: str) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-stand-in",
            "object": "chat.completion",
            "created": 0,
            "model": "stand-in",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }
    )
