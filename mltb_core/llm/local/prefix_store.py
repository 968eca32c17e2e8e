"""Prompt prefixes the local llama.cpp server saved to disk, so that a new server starts warm.

Every request of a task starts with the same first turn (the shared preamble: task description and tool
catalogue, ~2,000–4,000 tokens, see :func:`mltb_core.llm.prompts.shared_preamble`). A new server
process (each pytest run, each xdist worker, each benchmark script) evaluated it again: 60–110 s on 2
cores before the first tool call. The server's RAM cache (:mod:`mltb_core.llm.local.engine`) cannot help
across processes; this store can. It keeps the KV state of the first request that carried each distinct
first turn, and the server restores the longest stored prefix of a prompt when it beats what its RAM
cache and live context hold.

One file per saved state, named by the hash of its tokens, under a directory named by everything the
state's bytes depend on (:func:`store_directory`: the model file, llama.cpp's version, the context size
and attention kernel), so a state is only ever restored into a context that can take it. A file is
written to a temporary name and renamed, so servers sharing the store (two xdist workers) never read a
half-written state; each file carries a SHA-256 of its body, and one that does not match is deleted and
ignored (a crash mid-write on a filesystem without atomic rename, a disk error). Files are evicted least
recently used first beyond ``capacity_bytes``.

A saved state is a cache of model computation, never an input the model or the grader reads: it holds
the KV cells of prompts mltb wrote, and restoring one changes how fast a reply comes, not what it may say.
Standard library and NumPy only (imported by the server process, next to llama.cpp).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["PrefixStore", "SavedPrefix", "StoredEntry", "store_directory", "common_prefix", "FILE_SUFFIX"]

MAGIC = b"MLTBKV01"
FILE_SUFFIX = ".kv"
_HEADER_LENGTH = struct.Struct("<I")
# A header mltb writes is ~150 bytes of flat JSON; anything longer is not one of its files.
MAX_HEADER_BYTES = 4096
# Bounds of the header's counts: a context holds far fewer tokens, a vocabulary far fewer entries.
MAX_TOKENS = 1 << 24
MAX_VOCAB = 1 << 24


@dataclass(frozen=True)
class SavedPrefix:
    """A llama.cpp context's state after ``tokens``: the tokens, the last row of logits, the context's own
    state bytes (KV cells) and the sampler seed."""
    tokens: np.ndarray   # int32, the evaluated tokens in order
    scores: np.ndarray   # float32, shape (1, n_vocab)
    state: bytes
    seed: int


@dataclass(frozen=True)
class StoredEntry:
    path: Path
    tokens: np.ndarray
    size: int
    mtime_ns: int


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if len(differ) else n


def store_directory(root: str | os.PathLike, model_path: str | os.PathLike, **settings: object) -> Path:
    """The store of one model file and context setup under ``root``: states saved by another model, another
    llama.cpp build or context size land elsewhere and are never restored here."""
    path = Path(model_path).resolve()
    stat = path.stat()
    identity = json.dumps({"model": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, **settings},
                          sort_keys=True, default=str)
    return Path(root) / hashlib.sha256(identity.encode()).hexdigest()[:16]


def _warn(message: str) -> None:
    print(f"mltb prefix store: {message}", file=sys.stderr, flush=True)


class PrefixStore:
    """Saved prompt prefixes in ``directory``, at most ``capacity_bytes`` on disk (least recently used go)."""

    def __init__(self, directory: str | os.PathLike, capacity_bytes: int) -> None:
        self.directory = Path(directory)
        self.capacity_bytes = capacity_bytes
        self._index: dict[str, StoredEntry] = {}

    # ------------------------------------------------------------------ reading
    def entries(self) -> list[StoredEntry]:
        """The complete state files now in the store (headers read once per file version)."""
        seen: dict[str, StoredEntry] = {}
        try:
            files = list(os.scandir(self.directory))
        except FileNotFoundError:
            files = []
        except OSError as exc:  # not a directory, no permission: no store, never a failed request
            _warn(f"cannot list {self.directory}: {exc}")
            files = []
        for item in files:
            if not item.name.endswith(FILE_SUFFIX) or not item.is_file():
                continue  # temporary files of a write in progress end otherwise
            try:
                stat = item.stat()
            except FileNotFoundError:
                continue  # evicted meanwhile by another server
            known = self._index.get(item.name)
            if known is not None and known.mtime_ns == stat.st_mtime_ns and known.size == stat.st_size:
                seen[item.name] = known
                continue
            tokens = self._read_tokens(Path(item.path))
            if tokens is None:
                _warn(f"{item.name} is not an intact state file: deleted")
                with contextlib.suppress(OSError):
                    Path(item.path).unlink(missing_ok=True)
            else:
                seen[item.name] = StoredEntry(Path(item.path), tokens, stat.st_size, stat.st_mtime_ns)
        self._index = seen
        return list(seen.values())

    def longest(self, tokens: np.ndarray) -> tuple[StoredEntry | None, int]:
        """The stored entry sharing the most leading tokens with ``tokens``, and how many (0: none)."""
        best, best_length = None, 0
        for entry in self.entries():
            length = common_prefix(entry.tokens, tokens)
            if length > best_length:
                best, best_length = entry, length
        return best, best_length

    def load(self, entry: StoredEntry) -> SavedPrefix | None:
        """The state in ``entry`` (None: gone, or damaged, which deletes it), marked as recently used."""
        try:
            data = entry.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            _warn(f"cannot read {entry.path.name}: {exc}")
            return None
        parsed = self._parse(data, verify=True)
        if parsed is None:
            _warn(f"{entry.path.name} is damaged: deleted")
            with contextlib.suppress(OSError):
                entry.path.unlink(missing_ok=True)
            return None
        header, body = parsed
        n_tokens, n_vocab = header["n_tokens"], header["n_vocab"]
        tokens = np.frombuffer(body, dtype="<i4", count=n_tokens).astype(np.int32)
        offset = 4 * n_tokens
        scores = np.frombuffer(body, dtype="<f4", count=n_vocab, offset=offset).astype(np.float32).reshape(1, n_vocab)
        state = body[offset + 4 * n_vocab:]
        with contextlib.suppress(OSError):
            os.utime(entry.path)  # eviction goes by mtime: least recently used first
        return SavedPrefix(tokens=tokens, scores=scores, state=state, seed=header["seed"])

    # ------------------------------------------------------------------ writing
    def save(self, prefix: SavedPrefix) -> Path | None:
        """Write ``prefix`` (atomically), then evict beyond the capacity; None when it could not be written
        (the store is a speed-up: a full disk costs the next server its warm start, never a request)."""
        tokens = np.ascontiguousarray(prefix.tokens, dtype="<i4")
        scores = np.ascontiguousarray(prefix.scores, dtype="<f4").reshape(-1)
        body = tokens.tobytes() + scores.tobytes() + bytes(prefix.state)
        if len(body) > self.capacity_bytes:
            return None
        header = json.dumps({"n_tokens": int(len(tokens)), "n_vocab": int(len(scores)), "seed": int(prefix.seed),
                             "sha256": hashlib.sha256(body).hexdigest()}).encode()
        name = hashlib.sha256(tokens.tobytes()).hexdigest()[:32] + FILE_SUFFIX
        path = self.directory / name
        temporary = self.directory / f".{name}.{os.getpid()}.tmp"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(temporary, "wb") as out:
                out.write(MAGIC + _HEADER_LENGTH.pack(len(header)) + header + body)
            os.replace(temporary, path)
        except OSError as exc:
            _warn(f"cannot save a prefix of {len(tokens)} tokens: {exc}")
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            return None
        self._evict(keep=path)
        return path

    def _evict(self, keep: Path) -> None:
        entries = sorted(self.entries(), key=lambda e: e.mtime_ns)
        total = sum(e.size for e in entries)
        for entry in entries:
            if total <= self.capacity_bytes:
                break
            if entry.path == keep:
                continue
            entry.path.unlink(missing_ok=True)
            self._index.pop(entry.path.name, None)
            total -= entry.size

    # ------------------------------------------------------------------ format
    @staticmethod
    def _parse(data: bytes, verify: bool) -> tuple[dict, bytes] | None:
        """(header, body) of a state file's bytes; None when they are not a whole, intact state file."""
        start = len(MAGIC) + _HEADER_LENGTH.size
        if len(data) < start or not data.startswith(MAGIC):
            return None
        (length,) = _HEADER_LENGTH.unpack_from(data, len(MAGIC))
        header = _header(data[start:start + length]) if length <= MAX_HEADER_BYTES else None
        if header is None:
            return None
        n_tokens, n_vocab, digest = header["n_tokens"], header["n_vocab"], header["sha256"]
        body = data[start + length:]
        if len(body) < 4 * (n_tokens + n_vocab):
            return None
        if verify and hashlib.sha256(body).hexdigest() != digest:
            return None
        return header, body

    def _read_tokens(self, path: Path) -> np.ndarray | None:
        """The tokens of a state file, from its head only (the KV cells are read when it is restored); None
        when it is not an intact state file."""
        try:
            with open(path, "rb") as handle:
                head = handle.read(len(MAGIC) + _HEADER_LENGTH.size)
                if len(head) < len(MAGIC) + _HEADER_LENGTH.size or not head.startswith(MAGIC):
                    return None
                (length,) = _HEADER_LENGTH.unpack_from(head, len(MAGIC))
                header = _header(handle.read(length)) if length <= MAX_HEADER_BYTES else None
                if header is None:
                    return None
                n_tokens = header["n_tokens"]
                raw = handle.read(4 * n_tokens)
        except OSError:
            return None
        if len(raw) != 4 * n_tokens:
            return None
        return np.frombuffer(raw, dtype="<i4").astype(np.int32)


def _count(value: object, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limit


def _header(raw: bytes) -> dict | None:
    """A state file's header, checked field by field (None: not one mltb wrote). The one place a header is
    read, so a crafted one (deep nesting, a count of 1e300, a list) is a miss and never an exception on every
    request: the caller is bounded to MAX_HEADER_BYTES."""
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):   # not UTF-8 or not JSON; nested past the parser's stack
        return None
    if not (isinstance(header, dict) and _count(header.get("n_tokens"), MAX_TOKENS)
            and _count(header.get("n_vocab"), MAX_VOCAB) and isinstance(header.get("sha256"), str)
            and isinstance(header.get("seed"), int) and not isinstance(header.get("seed"), bool)
            and -(1 << 63) <= header["seed"] < 1 << 64):
        return None
    return header
