"""A fault-injecting HTTP proxy on loopback, in front of any OpenAI-compatible upstream.

At a seeded ``rate`` each request is answered with a fault instead of being forwarded: a delay past
the client's timeout, HTTP 429 / 500 / 503, a cut connection, malformed JSON, or an empty choice list.
Every injected fault is counted in :attr:`FaultProxy.injected` (by kind). An unreachable upstream is
answered 502. The proxy is bounded: ``max_faults`` caps the faults it injects, ``lifetime`` stops it
by itself (so a forgotten proxy never outlives the test), and a pending delay ends on :meth:`stop`.

Usage::

    with SimOpenAIServer() as upstream, FaultProxy(upstream.base_url, rate=0.3, seed=1) as proxy:
        os.environ["OPENAI_BASE_URL"] = proxy.base_url
        ...
        proxy.injected   # Counter({'http_503': 4, 'cut': 2, ...})
"""
from __future__ import annotations

import http.client
import json
import random
import socket
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["FaultProxy", "FAULTS"]

# Every kind of fault the proxy can inject.
FAULTS = ("delay", "http_429", "http_500", "http_503", "cut", "malformed_json", "empty_choices")


class _Handler(BaseHTTPRequestHandler):
    server: _ProxyServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fault = self.server.owner._next_fault()
        if fault is not None:
            self._inject(fault)
            return
        self._forward(method, body)

    do_GET = lambda self: self._handle("GET")    # noqa: E731
    do_POST = lambda self: self._handle("POST")  # noqa: E731

    def _inject(self, fault: str) -> None:
        proxy = self.server.owner
        if fault == "delay":
            # Hold the request past the client's timeout; the client gives up first.
            proxy._stopping.wait(proxy.delay_seconds)
            self.close_connection = True
            return
        if fault.startswith("http_"):
            status = int(fault[5:])
            message = json.dumps({"error": {"message": f"injected {status}", "type": "injected", "code": status}})
            self._reply(status, message.encode())
            return
        if fault == "cut":
            # Close without a status line: the client sees the connection drop.
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if fault == "malformed_json":
            self._reply(200, b'{"id": "chatcmpl-broken", "choices": [{"message": ')
            return
        if fault == "empty_choices":
            self._reply(200, json.dumps({"id": "chatcmpl-empty", "object": "chat.completion", "created": 0,
                                         "model": "injected", "choices": []}).encode())
            return
        raise ValueError(f"unknown fault {fault!r}")

    def _forward(self, method: str, body: bytes) -> None:
        proxy = self.server.owner
        target = urlsplit(proxy.upstream)
        # The client's path is relative to our base URL (/v1/...); the upstream's base may differ.
        path = target.path.rstrip("/") + self.path[len(proxy.base_path):]
        conn = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=proxy.upstream_timeout)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
            conn.request(method, path, body=body or None, headers=headers)
            response = conn.getresponse()
            data = response.read()
            self._reply(response.status, data, response.getheader("Content-Type", "application/json"))
        except OSError as exc:
            proxy._count("upstream_down")
            message = json.dumps({"error": {"message": f"upstream unreachable: {exc}", "code": 502}})
            self._reply(502, message.encode())
        finally:
            conn.close()


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: FaultProxy


class FaultProxy:
    """Forward to ``upstream`` (a base URL like ``http://127.0.0.1:8000/v1``), injecting faults.

    ``rate`` is the probability that a request gets a fault; ``faults`` the kinds drawn from
    (uniformly, by a ``seed``-ed RNG); ``delay_seconds`` how long a ``delay`` fault holds the request
    (make it longer than the client timeout); ``max_faults`` a cap (None: no cap); ``lifetime``
    seconds after which the proxy stops by itself.
    """

    base_path = "/v1"

    def __init__(self, upstream: str, *, rate: float = 0.3, seed: int = 0, faults: tuple[str, ...] = FAULTS,
                 delay_seconds: float = 2.0, max_faults: int | None = None, lifetime: float = 120.0,
                 upstream_timeout: float = 30.0):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be in [0, 1], got {rate}")
        unknown = sorted(set(faults) - set(FAULTS))
        if unknown:
            raise ValueError(f"unknown fault kind(s) {unknown}; known: {', '.join(FAULTS)}")
        self.upstream = upstream.rstrip("/")
        self.rate = rate
        self.faults = tuple(faults)
        self.delay_seconds = delay_seconds
        self.max_faults = max_faults
        self.lifetime = lifetime
        self.upstream_timeout = upstream_timeout
        self.injected: Counter[str] = Counter()
        self.requests = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _ProxyServer(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fault-proxy", daemon=True)
        self._timer = threading.Timer(lifetime, self.stop)
        self._timer.daemon = True

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{self.base_path}"

    @property
    def total_injected(self) -> int:
        return sum(v for k, v in self.injected.items() if k in FAULTS)

    def _count(self, kind: str) -> None:
        with self._lock:
            self.injected[kind] += 1

    def _next_fault(self) -> str | None:
        """Draw this request's fault (None: forward it). Draws happen in request order."""
        with self._lock:
            self.requests += 1
            capped = self.max_faults is not None and self.total_injected >= self.max_faults
            draw, kind = self._rng.random(), self._rng.choice(self.faults)
            if capped or draw >= self.rate:
                return None
            self.injected[kind] += 1
            return kind

    def start(self) -> FaultProxy:
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        """Stop serving (idempotent; also called by the lifetime timer)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._thread.join(timeout=5)
