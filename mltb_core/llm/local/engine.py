"""mltb's own OpenAI-compatible chat server over ``llama_cpp.Llama`` (run as ``python -m mltb_core.llm.local.engine``).

Why not ``python -m llama_cpp.server``: a tree search switches branches, and that server keeps only the
KV cache of the previous request, so every switch re-evaluated the whole history (~4k tokens: a minute
on 2 cores for a 1.5B model). Its ``--cache`` fixes that in principle, but every saved state copied
``n_batch × n_vocab`` logits (311 MB for Qwen's 152k vocabulary) after each call, and it never says how
many prompt tokens it reused, so the cost table showed "cached in" 0 for every local run.

Here:

- a prefix cache that survives branch switches: llama-cpp-python's LlamaRAMCache (longest-prefix lookup,
  LRU within ``--cache-bytes``), holding lean states (the KV cells; one logits row, since the suffix
  evaluated after a restore refreshes the logits anyway);
- a prefix store on disk (``--prefix-store``, :mod:`mltb_core.llm.local.prefix_store`): the state of the first
  request that carried each distinct first turn (the shared preamble) is saved, so a new server restores it
  instead of evaluating 2–4k tokens cold (60–110 s on 2 cores) before its first reply;
- every reply reports ``usage.prompt_tokens_details.cached_tokens`` (the OpenAI field that
  :func:`mltb_core.llm.openai_backend.server_cached_tokens` reads): the prompt tokens not evaluated for
  this request, i.e. taken from the live KV cache or a restored state;
- prompt-lookup drafts (``--draft-tokens``, off by default): a tool call mostly repeats what the prompt
  already holds (tool and parameter names, object names, JSON keys), so the tokens that followed the latest
  earlier occurrence of the last few tokens are proposed and checked in one batch. llama-cpp-python's own
  speculative loop in ``Llama.generate`` samples every drafted position (grammar included) and keeps a
  draft token only when the sample equals it, so replies follow the same distribution (with a seed, the
  same replies); upstream needs ``logits_all`` for it (an n_ctx × n_vocab array, 10 GB at 16k context),
  here only the drafted batch returns its rows. Off because on 2 shared cores each extra row costs more
  than the passes it saves (reports/benchmarks.md); where extra rows are cheap, MLTB_DRAFT_TOKENS turns it on;
- grammar fast-forward (``--fast-forward``, on unless ``MLTB_FAST_FORWARD=off``; :mod:`mltb_core.llm.local.forcing`):
  half of a tool call's tokens are the JSON skeleton and name endings its grammar fixes, so those are
  emitted without sampling and evaluated in one batch with the token sampled before them; the grammar's
  whitespace is json.dumps's, as in the model's own history. A warm 34-token call: 5 forward passes
  instead of 35;
- every message in order with its own role (:func:`chatml_prompt`): llama-cpp-python's "chatml" format
  keeps the first system message only, so a planner's instructions (the second system message: ReAct's,
  MCTS's expansion prompt, Hierarchical MCTS's subtask, LATS's judge) never reached the model;
- one model, one lock: requests are served one at a time (llama.cpp's context is not thread-safe).

Only what mltb's local backend sends is served: ``GET /v1/models``, ``POST /v1/chat/completions``
(no streaming; ``n`` > 1 gives n choices decoded one after another, the prompt evaluated once).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mltb_core.llm.local.forcing import GrammarProbe, canonical_json_grammar, json_schema_grammar

__all__ = ["main", "build_parser", "CHAT_ARGS", "CHAT_ROLES", "chatml_prompt", "pid_alive", "users_gone",
           "lookup_draft"]

# The request fields passed on to Llama.create_chat_completion (others are ignored, as OpenAI's are).
CHAT_ARGS = ("messages", "tools", "tool_choice", "temperature", "top_p", "stop", "seed", "response_format",
             "max_tokens", "presence_penalty", "frequency_penalty")


# The roles a ChatML turn can carry; the client (mltb_core.llm.local.chatml_messages) maps tool results to user
# turns and calls to JSON text before a request gets here.
CHAT_ROLES = ("system", "user", "assistant")


def chatml_prompt(messages: list[dict[str, Any]]) -> str:
    """The prompt of ``messages`` in ChatML as Qwen2.5's and SmolLM2's own templates render text turns: each
    message in order, with its role, then the assistant's turn. A conversation with one system message, first,
    gives byte for byte the prompt of llama-cpp-python's "chatml" format, which drops every later system
    message. ValueError (a 400 reply) names a role or content it cannot render."""
    turns = [] if messages and messages[0].get("role") == "system" else ["<|im_start|>system\n<|im_end|>\n"]
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if role not in CHAT_ROLES:
            raise ValueError(f"message {i}: role {role!r} cannot be rendered (roles: {', '.join(CHAT_ROLES)})")
        if not isinstance(content, str):
            raise ValueError(f"message {i}: content must be text, got {type(content).__name__}")
        turns.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    return "".join(turns) + "<|im_start|>assistant\n"


def _chat_handler(chat_format: str) -> Any:
    """The chat handler for ``chat_format``: mltb's own for ChatML (see :func:`chatml_prompt`), else None
    (llama-cpp-python's)."""
    if chat_format != "chatml":
        return None
    from llama_cpp import llama_chat_format

    def format_chatml(messages: list[dict[str, Any]], **_: Any) -> Any:
        return llama_chat_format.ChatFormatterResponse(prompt=chatml_prompt(messages), stop="<|im_end|>")

    return llama_chat_format.chat_formatter_to_chat_completion_handler(format_chatml)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mltb_core.llm.local.engine", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n_ctx", type=int, default=8192)
    parser.add_argument("--n_batch", type=int, default=512)
    parser.add_argument("--n_threads", type=int, default=1)
    parser.add_argument("--n_threads_batch", type=int, default=1)
    parser.add_argument("--chat_format", default="chatml")
    parser.add_argument("--flash_attn", choices=("true", "false"), default="true")
    parser.add_argument("--draft-tokens", type=int, default=0,
                        help="prompt-lookup drafts of up to this many tokens per decoding step (0: none)")
    parser.add_argument("--fast-forward", choices=("true", "false"), default="false",
                        help="emit the bytes a call's grammar allows one way only without decoding them, and pin "
                             "the grammar's whitespace to json.dumps's (mltb_core.llm.local.forcing)")
    parser.add_argument("--cache-bytes", type=int, default=0, help="prefix-cache capacity in bytes (0: none)")
    parser.add_argument("--prefix-store", type=Path,
                        help="directory of prompt prefixes saved across server processes (with --cache-bytes)")
    parser.add_argument("--prefix-store-bytes", type=int, default=0,
                        help="disk the prefix store may fill, in bytes (0: no store)")
    parser.add_argument("--log-requests", action="store_true",
                        help="one JSON line per request on stderr: tokens, cached, seconds (for benchmarks)")
    parser.add_argument("--users-file", type=Path,
                        help="the shared state file listing the pids that use this server: it exits once none "
                             "of them runs (users killed with SIGKILL never release it)")
    parser.add_argument("--users-grace", type=float, default=120.0,
                        help="seconds after it listens before a missing state file or another server's pid "
                             "in it means it was never registered or was replaced")
    return parser


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs and is not a zombie (standard library only: the main job's extra is lean)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    try:  # Linux: a zombie still answers kill(0); its /proc state is 'Z'
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:][:1] != "Z"
    except (OSError, ValueError):
        return True


def users_gone(users_file: Path, server_pid: int, listening_for: float, grace: float) -> bool:
    """Whether nobody can use this server any more: every pid its state file lists has exited, or, once
    ``grace`` seconds have passed since it started listening, the file is missing (its starter died before
    registering it, or its last user released it) or names another server (this one was replaced).
    The file is replaced atomically by its writers, so a read sees a whole state or none."""
    try:
        state = json.loads(users_file.read_text())
    except FileNotFoundError:
        return listening_for > grace
    except (OSError, ValueError):
        return False  # unreadable now: look again later rather than kill a server in use
    if not isinstance(state, dict) or state.get("pid") != server_pid:
        return listening_for > grace
    users = state.get("users")
    if not isinstance(users, list):
        return False  # an older state format without pids: cannot tell
    return not any(isinstance(pid, int) and pid_alive(pid) for pid in users)


def _watch_users(server: ThreadingHTTPServer, users_file: Path, grace: float, interval: float = 10.0) -> None:
    """Stop serving once :func:`users_gone` says so twice in a row (a daemon thread): a process joining just
    as the last user died registers itself in between, and keeps the server."""
    started, gone_before = time.monotonic(), False
    while True:
        time.sleep(interval)
        gone = users_gone(users_file, os.getpid(), time.monotonic() - started, grace)
        if gone and gone_before:
            print(f"mltb llama server: no process uses it any more ({users_file}): exiting", file=sys.stderr,
                  flush=True)
            server.shutdown()
            return
        gone_before = gone


def lookup_draft(tokens: Any, k: int, max_ngram: int = 3) -> Any:
    """The ``k`` tokens that followed the latest earlier occurrence of the last n tokens of ``tokens``
    (n from ``max_ngram`` down to 1; none found: empty). The latest, not the first as upstream's
    LlamaPromptLookupDecoding: the recent history predicts the next tool call best (replaying the
    table's trajectories: 3.4 instead of 2.8 tokens per step at k = 4)."""
    import numpy as np

    tokens = np.asarray(tokens, dtype=np.intc)
    for n in range(min(max_ngram, len(tokens) - 1), 0, -1):
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)  # excludes the suffix itself
        starts = np.flatnonzero((windows == tokens[-n:]).all(axis=1))
        if len(starts):
            return tokens[starts[-1] + n:starts[-1] + n + k]
    return tokens[:0]


class _PromptLookup:
    """The draft model llama-cpp-python's ``Llama.generate`` calls before each decoding step. It marks the
    next ``eval`` as a drafted batch: the sampled token then its drafts, every row sampled."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.armed = False

    def __call__(self, input_ids: Any, /, **kwargs: Any) -> Any:
        self.armed = True
        return lookup_draft(input_ids, self.k)


# A first turn is saved only when the store would then restore at least this many more of its tokens:
# evaluating fewer takes seconds, a file takes ~30 KB per token. (Hierarchical MCTS appends each subtask's
# few tools to the preamble: those variants share the stored preamble and are not saved again.)
MIN_STORED_GAIN = 512


def first_turn_end(tokens: Any, end_of_turn: int | None) -> int | None:
    """How many tokens the first chat turn takes, its end-of-turn token included (None: no whole first turn,
    or no end-of-turn token in this model's vocabulary)."""
    import numpy as np

    if end_of_turn is None:
        return None
    ends = np.flatnonzero(np.asarray(tokens) == end_of_turn)
    return int(ends[0]) + 1 if len(ends) else None


class Engine:
    """The model, its prompt cache and the count of prompt tokens each request evaluated."""

    def __init__(self, args: argparse.Namespace) -> None:
        import llama_cpp

        from mltb_core.llm.local.lean import LeanLlama, PrefixCache

        self.evaluated: list[int] = []
        if not 0 <= args.draft_tokens < args.n_batch:
            raise ValueError(f"--draft-tokens must be from 0 to {args.n_batch - 1}, got {args.draft_tokens}")
        self.drafts = _PromptLookup(args.draft_tokens) if args.draft_tokens else None
        if self.drafts and args.fast_forward == "true":
            raise ValueError("--draft-tokens and --fast-forward true cannot be combined")
        self.forcing: GrammarProbe | None = None
        self.forced_start = 0  # tokens of the reply's forced start, evaluated with the prompt
        self._grammars: dict[str, Any] = {}
        self.forced_starts: dict[str, list[int]] = {}  # grammar text -> the tokens every reply starts with
        self.lock = threading.Lock()
        self.model_name = args.model
        self.log_requests = args.log_requests
        self.llm = LeanLlama(self, model_path=args.model, n_ctx=args.n_ctx, n_batch=args.n_batch, n_threads=args.n_threads,
                             n_threads_batch=args.n_threads_batch, chat_format=args.chat_format,
                             chat_handler=_chat_handler(args.chat_format),
                             flash_attn=args.flash_attn == "true", verbose=False)
        self.llm.draft_model = self.drafts  # after __init__, which would turn logits_all on for a draft model
        self.restored: list[int] = []  # prompt tokens restored from the prefix store in this request
        if args.cache_bytes > 0:
            store = None
            if args.prefix_store is not None and args.prefix_store_bytes > 0:
                from mltb_core.llm.local.prefix_store import PrefixStore, store_directory

                store = PrefixStore(store_directory(args.prefix_store, args.model, llama_cpp=llama_cpp.__version__,
                                                    n_ctx=args.n_ctx, flash_attn=args.flash_attn),
                                    args.prefix_store_bytes)
            self.llm.set_cache(PrefixCache(self, args.cache_bytes, store))
        if args.fast_forward == "true":
            self.forcing = GrammarProbe(llama_cpp, self.llm)
            why = None if self.forcing.complete else "this vocabulary lacks single-byte tokens"
            chain = llama_cpp._internals.LlamaSampler()
            chain.add_grammar(self.llm._model, llama_cpp.LlamaGrammar.from_string('root ::= "a"', verbose=False))
            if GrammarProbe.grammar_sampler(llama_cpp, chain.sampler) is None:
                why = "no sampler named 'grammar' in llama-cpp-python's chain"  # the forced start needs it
            chain.close()
            if why:  # a byte the probe cannot see might be allowed, or a forced byte never reach the grammar
                print(f"mltb llama server: {why}: no grammar fast-forward", file=sys.stderr, flush=True)
                self.forcing = None
        # A batch of several tokens before listening: a llama.cpp build whose kernels this CPU cannot run
        # (AMX on VMs that list it) dies here, while starting, not on a trial's first call.
        self.llm.eval(self.llm.tokenize(b"self test of the batch kernels"))
        self.llm.reset()

    def _grammar(self, schema: Any) -> Any:
        """The call schema's grammar, with json.dumps's whitespace when fast-forward is on (kept per schema: a
        search repeats states)."""
        from llama_cpp import llama_grammar

        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            if len(self._grammars) >= 256:
                self._grammars.clear()
                self.forced_starts.clear()
            gbnf = json_schema_grammar(schema)
            if self.forcing is not None:
                gbnf = canonical_json_grammar(gbnf)
            self._grammars[key] = llama_grammar.LlamaGrammar.from_string(gbnf, verbose=False)
        return self._grammars[key]

    def chat(self, request: dict[str, Any]) -> dict[str, Any]:
        kwargs = {k: request[k] for k in CHAT_ARGS if request.get(k) is not None}
        if not isinstance(kwargs.get("messages"), list):
            raise ValueError("'messages' must be a list")
        response_format = kwargs.get("response_format")
        # mltb's own converter, not llama-cpp-python's (json_schema_grammar says why)
        if isinstance(response_format, dict) and \
                response_format.get("type") == "json_object" and isinstance(response_format.get("schema"), dict):
            kwargs["grammar"] = self._grammar(kwargs.pop("response_format")["schema"])
        n = request.get("n") or 1
        if not isinstance(n, int) or not 1 <= n <= 20:
            raise ValueError("'n' must be an integer from 1 to 20")
        choices, prompt_tokens, completion_tokens, cached, restored, steps = [], 0, 0, 0, 0, 0
        start = time.perf_counter()
        with self.lock:
            for i in range(n):
                if n > 1 and "seed" in kwargs:
                    kwargs["seed"] = request["seed"] + i
                self.evaluated, self.restored, self.forced_start = [], [], 0
                if self.drafts:
                    self.drafts.armed = False
                reply = self.llm.create_chat_completion(**kwargs)
                usage = reply["usage"]
                # the first eval of a request is its prompt suffix (with the reply's forced start); later
                # ones are single sampled tokens, or one with the bytes its grammar forced
                evaluated = max((self.evaluated[0] if self.evaluated else 0) - self.forced_start, 0)
                if i == 0:
                    prompt_tokens = usage["prompt_tokens"]
                    cached = max(prompt_tokens - evaluated, 0)
                    restored = sum(self.restored)
                completion_tokens += usage["completion_tokens"]
                steps += len(self.evaluated)  # model evaluations: the prompt, then one per decoding step
                choices += [{**choice, "index": len(choices)} for choice in reply["choices"]]
        if self.log_requests:
            print(json.dumps({"request": {"prompt_tokens": prompt_tokens, "cached_tokens": cached,
                                          "restored_tokens": restored, "n": n,
                                          "completion_tokens": completion_tokens,
                                          "forward_passes": steps, "seconds": round(time.perf_counter() - start, 3)}}),
                  file=sys.stderr, flush=True)
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
                "model": request.get("model") or self.model_name, "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens,
                          "prompt_tokens_details": {"cached_tokens": cached}}}


class EngineServer(ThreadingHTTPServer):
    """The HTTP server of one :class:`Engine` (its handlers reach the engine through ``self.server``)."""

    def __init__(self, address: tuple[str, int], engine: Engine) -> None:
        self.engine = engine
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    """``GET /v1/models`` and ``POST /v1/chat/completions`` of the OpenAI API, answered by the server's engine."""

    server: EngineServer
    protocol_version = "HTTP/1.1"

    def _send(self, status: int, document: dict[str, Any]) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [{"id": self.server.engine.model_name, "object": "model",
                                                         "owned_by": "me"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if not isinstance(request, dict):
                raise ValueError("the request body must be a JSON object")
            if request.get("stream"):
                raise ValueError("streaming is not supported")
            self._send(200, self.server.engine.chat(request))
        except (ValueError, TypeError, KeyError) as exc:  # a bad request, or llama.cpp refusing it
            self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
        except Exception as exc:  # noqa: BLE001 - reported to the client as a server error
            self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}", "type": "server_error"}})

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: the log is for errors
        pass


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    engine = Engine(args)
    server = EngineServer((args.host, args.port), engine)
    print(f"mltb llama server: {args.model} on http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    if args.users_file is not None:
        threading.Thread(target=_watch_users, args=(server, args.users_file, args.users_grace), daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
