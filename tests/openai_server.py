"""A small real OpenAI-compatible HTTP server for tests: ``POST /v1/chat/completions`` answers scripted
replies (content, HTTP status, delay, finish_reason, hang) and records every request it received.

It can also reject ``response_format`` dialects the way real servers do: llama-cpp-python answers
``json_schema`` with HTTP 500 and a pydantic validation error (see shared/VERIFIER-SERVERS.md).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

VALID = '{"intent": "SEARCH", "reason_code": "fresh_request"}'

# what llama-cpp-python 0.3.x answers to response_format {"type": "json_schema", ...}
LLAMA_CPP_REJECTION = {
    "detail": [
        {
            "type": "literal_error",
            "loc": ["body", "response_format", "type"],
            "msg": "Input should be 'text' or 'json_object'",
            "input": "json_schema",
            "ctx": {"expected": "'text' or 'json_object'"},
        }
    ]
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many clients connect at once in the concurrency tests


@dataclass
class Reply:
    """One scripted answer. ``body`` (str) replaces the whole response body when given."""

    content: str | None = VALID
    status: int = 200
    delay: float = 0.0
    finish_reason: str = "stop"
    hang: bool = False  # never answer (until the server stops); the client must time out
    body: str | None = None


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


class OpenAIServer:
    """Threaded HTTP/1.1 server on 127.0.0.1 (port 0). Replies come from ``script`` in order, then ``default``."""

    def __init__(self, reject: tuple[str, ...] = ()) -> None:
        self.reject = set(reject)  # response_format types answered with a llama.cpp-style HTTP 500
        self.script: deque[Reply] = deque()
        self.default = Reply()
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_unparsed": raw.decode("utf-8", "replace")}
                with server._lock:
                    server.requests.append(
                        Received(
                            self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()
                        )
                    )
                if not urlsplit(self.path).path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}))
                fmt = (body.get("response_format") or {}).get("type")
                if fmt in server.reject:
                    err = dict(LLAMA_CPP_REJECTION)
                    err["detail"] = [dict(err["detail"][0], input=fmt)]
                    return self._send(500, json.dumps(err))
                reply = server.next_reply()
                if reply.hang:
                    server._release.wait(60)
                    self.close_connection = True
                    return
                if reply.delay:
                    server._release.wait(reply.delay)
                if reply.body is not None:
                    return self._send(reply.status, reply.body)
                if reply.status >= 400:
                    return self._send(
                        reply.status, json.dumps({"error": {"message": f"scripted {reply.status}"}})
                    )
                return self._send(
                    reply.status,
                    json.dumps(
                        {
                            "id": "chatcmpl-test",
                            "object": "chat.completion",
                            "created": int(time.time()),
                            "model": body.get("model", "test-model"),
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": reply.finish_reason,
                                    "message": {"role": "assistant", "content": reply.content},
                                }
                            ],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                        }
                    ),
                )

            def _send(self, status: int, text: str) -> None:
                data = text.encode("utf-8")
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout) and closed the connection
                    self.close_connection = True

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # ----------------------------------------------------------------------------------- control
    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *replies: Reply | str) -> OpenAIServer:
        """Queue replies; a str is a 200 answer with that content."""
        with self._lock:
            self.script.extend(Reply(content=r) if isinstance(r, str) else r for r in replies)
        return self

    def next_reply(self) -> Reply:
        with self._lock:
            return self.script.popleft() if self.script else self.default

    def chat_requests(self) -> list[Received]:
        with self._lock:
            return [
                r for r in self.requests if urlsplit(r.path).path.rstrip("/").endswith("/chat/completions")
            ]

    def start(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __enter__(self) -> OpenAIServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        self._release.set()  # let hanging and delayed handlers finish
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


@pytest.fixture
def openai_server():
    """A started OpenAIServer; stopped after the test."""
    server = OpenAIServer().start()
    yield server
    server.stop()


@pytest.fixture
def llama_cpp_server():
    """An OpenAIServer that rejects response_format json_schema with HTTP 500, like llama-cpp-python."""
    server = OpenAIServer(reject=("json_schema",)).start()
    yield server
    server.stop()


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on: connecting is refused."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on: connecting is refused."""
    return free_port()
