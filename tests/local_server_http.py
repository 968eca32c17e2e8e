"""One chat request to a local llama.cpp server, raw (the tests read fields the OpenAI client hides)."""
from __future__ import annotations

import json
import urllib.error
import urllib.request


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(f"{url}/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=600) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
