"""A scriptable OpenAI-compatible HTTP server for tests and fault injection.

Usage::

    with FakeOpenAIServer() as server:
        server.enqueue(error(429), tool_call_reply("read_data", {"func_kwargs": {...}}))
        backend = OpenAIBackend("gpt-4o", base_url=server.base_url, api_key="test")
        ...
        server.requests   # every request body received, in order

Each ``POST /v1/chat/completions`` pops the next :class:`Step` (``server.default`` when the queue is
empty). ``GET /v1/models`` answers a model list, as llama.cpp's server does.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAIServer", "Step", "tool_call_reply", "content_reply", "error", "delay",
           "malformed_body", "empty_choices", "connection_cut"]


@dataclass
class Step:
    """One scripted answer: an HTTP status with a JSON (or raw text) body, after ``delay`` seconds.

    ``choices`` are message dicts; with ``fill_n`` the first is repeated up to the request's ``n``.
    ``cut`` closes the connection without answering.
    """

    status: int = 200
    choices: list[dict[str, Any]] | None = None
    raw_body: str | None = None
    delay: float = 0.0
    cut: bool = False
    fill_n: bool = True
    prompt_tokens: int = 10
    completion_tokens: int = 5
    cached_tokens: int | None = None          # usage.prompt_tokens_details.cached_tokens (OpenAI)
    timings: dict[str, Any] | None = None     # llama.cpp's non-standard top-level "timings"
    usage_extra: dict[str, Any] | None = None  # more usage fields, as other servers name them
    finish_reason: str | None = None          # every choice's, instead of "tool_calls"/"stop" (e.g. "length")

    def body(self, request: dict[str, Any]) -> str:
        if self.raw_body is not None:
            return self.raw_body
        messages = list(self.choices or [])
        wanted = int(request.get("n") or 1)
        if self.fill_n and messages:
            messages = (messages * wanted)[:max(wanted, len(messages))]
        choices = [{"index": i,
                    "finish_reason": self.finish_reason or ("tool_calls" if m.get("tool_calls") else "stop"),
                    "message": {"role": "assistant", **m}} for i, m in enumerate(messages)]
        usage: dict[str, Any] = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                                 "total_tokens": self.prompt_tokens + self.completion_tokens}
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        usage.update(self.usage_extra or {})
        body: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                                "model": request.get("model", "fake"), "choices": choices, "usage": usage}
        if self.timings is not None:
            body["timings"] = self.timings
        return json.dumps(body)


def tool_call_reply(name: str, arguments: dict[str, Any] | str, *, content: str | None = None,
                    **usage: int) -> Step:
    """A native ``message.tool_calls`` reply; ``arguments`` as a dict or a raw (maybe broken) string."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    message = {"content": content, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}]}
    return Step(choices=[message], **usage)


def content_reply(*texts: str, fill_n: bool = True, **usage: Any) -> Step:
    """Plain text replies (one choice per text), e.g. JSON tool calls written in the content."""
    return Step(choices=[{"content": t} for t in texts], fill_n=fill_n, **usage)


def error(status: int, message: str = "injected failure") -> Step:
    return Step(status=status, raw_body=json.dumps({"error": {"message": message, "type": "fake", "code": status}}))


def delay(seconds: float, then: Step | None = None) -> Step:
    """Answer ``then`` (a text reply by default) only after ``seconds``; provokes client timeouts."""
    step = then or content_reply("late")
    step.delay = seconds
    return step


def malformed_body() -> Step:
    return Step(raw_body='{"id": "x", "choices": [ this is not json')


def empty_choices() -> Step:
    return Step(choices=[])


def connection_cut() -> Step:
    return Step(cut=True)


@dataclass
class _State:
    queue: deque[Step] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeOpenAIServer:
    """OpenAI-compatible server on 127.0.0.1 and a free port, in a daemon thread."""

    def __init__(self, default: Step | None = None, model_ids: tuple[str, ...] = ("fake-model",)) -> None:
        self.default = default or content_reply("ok")
        self.model_ids = model_ids
        self._state = _State()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> FakeOpenAIServer:
        handler = _make_handler(self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # scripting
    def enqueue(self, *steps: Step) -> None:
        with self._state.lock:
            self._state.queue.extend(steps)

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def pending(self) -> int:
        with self._state.lock:
            return len(self._state.queue)

    def _next(self, request: dict[str, Any]) -> Step:
        with self._state.lock:
            self._state.requests.append(request)
            return self._state.queue.popleft() if self._state.queue else self.default


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def _send(self, status: int, body: str) -> None:
            data = body.encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up (e.g. timed out on a delay step)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, json.dumps({"object": "list", "data": [
                    {"id": m, "object": "model", "owned_by": "fake"} for m in server.model_ids]}))
            else:
                self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            try:
                request = json.loads(raw) if raw else {}
            except json.JSONDecodeError:
                request = {"_raw": raw}
            request["_path"] = self.path
            step = server._next(request)
            if step.delay:
                time.sleep(step.delay)
            if step.cut:
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            self._send(step.status, step.body(request))

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Run standalone (``python fake_openai_server.py --port N``): a stand-in for llama.cpp's server."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    server = FakeOpenAIServer()
    handler = _make_handler(server)
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    httpd.daemon_threads = True
    httpd.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
