"""An OpenAI-compatible HTTP server whose replies come from the real synthetic policy (SimPolicy).

A seeded trial run with ``model="openai:<name>"`` against this server is as meaningful as a ``sim``
trial: the server maps each ``POST /v1/chat/completions`` (messages, tools, n, seed) to
``SimPolicy.complete`` and answers native ``tool_calls`` in the Chat Completions shape, with usage.
The policy is rebuilt per request from (skill, seed), so answers depend only on the request: a
retried request gets the same answer, which is what makes fault-injected runs comparable.

Usage::

    with SimOpenAIServer(skill=0.7, seed=0) as server:
        backend = OpenAIBackend("sim-gpt", base_url=server.base_url, api_key="test", price=FREE)
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mltb_core.llm.sim import SimPolicy

__all__ = ["SimOpenAIServer", "completion_body"]


def completion_body(request: dict[str, Any], skill: float, seed: int, ignores_n: bool = False) -> dict[str, Any]:
    """The Chat Completions response body SimPolicy gives for ``request`` (one choice whatever its ``n`` with
    ``ignores_n``, as llama_cpp.server and Ollama answer)."""
    policy = SimPolicy(skill, seed)
    n = 1 if ignores_n else int(request.get("n") or 1)
    response = policy.complete(request.get("messages") or [], request.get("tools") or [], n=n,
                               temperature=float(request.get("temperature", 0.7)), seed=request.get("seed"))
    choices = []
    for index, candidate in enumerate(response.candidates):
        message: dict[str, Any] = {"role": "assistant", "content": candidate.text or None}
        if candidate.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{index}_{k}", "type": "function",
                 "function": {"name": call.tool_name, "arguments": json.dumps(call.to_dict()["tool_args"])}}
                for k, call in enumerate(candidate.tool_calls)]
        choices.append({"index": index, "message": message,
                        "finish_reason": "tool_calls" if candidate.tool_calls else "stop"})
    usage = response.usage
    return {"id": "chatcmpl-sim", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", "sim"), "choices": choices,
            "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                      "total_tokens": usage.prompt_tokens + usage.completion_tokens}}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "sim", "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as exc:
            self._send(400, {"error": {"message": f"request body is not JSON: {exc}"}})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        with self.server.lock:
            self.server.requests += 1
        self._send(200, completion_body(request, self.server.skill, self.server.seed, self.server.ignores_n))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, skill: float, seed: int, ignores_n: bool):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.skill = skill
        self.seed = seed
        self.ignores_n = ignores_n
        self.requests = 0
        self.lock = threading.Lock()


class SimOpenAIServer:
    """SimPolicy behind ``http://127.0.0.1:<free port>/v1`` in a background thread (``ignores_n``: one
    choice per request, whatever its ``n``)."""

    def __init__(self, skill: float = 0.7, seed: int = 0, ignores_n: bool = False):
        self._server = _Server(skill, seed, ignores_n)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="sim-openai", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def requests(self) -> int:
        """Chat completion requests answered so far."""
        return self._server.requests

    def start(self) -> SimOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> SimOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":  # python tests/sim_openai_server.py: serve until Ctrl-C
    with SimOpenAIServer() as running:
        print(running.base_url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
