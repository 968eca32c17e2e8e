"""The backend registry: the one place that knows what a model string means.

A model string is ``<backend>`` or ``<backend>:<argument>`` (``sim``, ``sim:0.6``, ``local``,
``local:/m/x.gguf``, ``openai:gpt-4o``). Each backend is a :class:`BackendSpec` subclass named with
``@backend("<name>")`` that says how its argument is parsed and validated, its id in test ids and file
names, its price, whether it is synthetic (not an LLM), what it needs before a run (``preflight``) and
how to build the :class:`~mltb_core.llm.base.LLMBackend` for one trial.

Backends are found through the entry-point group ``mltb.backends`` — the built-ins below exactly
like a third party's::

    # pyproject.toml of your package
    [project.entry-points."mltb.backends"]
    mine = "my_pkg.mltb_backend:MyBackend"     # a @backend("mine") BackendSpec subclass

(:func:`register_backend` registers one from code, e.g. a conftest.) This module imports no backend
implementation until one is built, so parsing model strings at collection stays cheap.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

from mltb_core.environment import read as read_environment
from mltb_core.llm.base import LLMBackend, UnknownModelError
from mltb_core.llm.local import models as _models
from mltb_core.plugins import RegistryError, claim, did_you_mean, load_entry_points

__all__ = ["ENTRY_POINT_GROUP", "DEFAULT_MODEL", "BackendSpec", "ModelRef", "Preflight", "backend",
           "register_backend", "get_backend", "available_backends", "parse_model", "parse_models", "as_model_ref",
           "builtin_model_forms", "model_id", "is_synthetic", "model_forms", "preflight", "custom_openai_base_url",
           "BackendRegistryError", "scoped_backends", "WorkerNeeds", "SimSettings", "SIM_NEUTRAL"]

ENTRY_POINT_GROUP = "mltb.backends"
DEFAULT_MODEL = "local"

# The built-ins' entry points. Their home is pyproject.toml ([project.entry-points."mltb.backends"]): the
# built-ins are found through the group like a third party's, so that path runs on every run. This copy
# serves a checkout used without an install (no metadata) or an install older than the declarations;
# tests/test_model_ref.py checks it equals pyproject.toml's table.
_BUILTIN_ENTRY_POINTS = {"openai": "mltb_core.llm.backends:OpenAISpec",
                         "local": "mltb_core.llm.backends:LocalSpec",
                         "sim": "mltb_core.llm.backends:SimSpec"}


class BackendRegistryError(RegistryError):
    """A backend entry point is broken, or two backends claim one name."""


def _id_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


class BackendSpec:
    """How one backend's model strings are read, named, priced, checked and built.

    Subclass it, name it with ``@backend("name")`` and override what differs; the defaults suit a
    free backend that takes its argument as plain text.
    """

    name: str = ""
    forms: tuple[str, ...] = ()        # how its model strings look, for help and error messages
    synthetic: bool = False            # True: not an LLM (tables say so)

    def parse(self, arg: str) -> Any:
        """The parsed argument (``arg`` is "" for a bare ``name``); raise ValueError naming the problem."""
        return arg

    def model_id(self, arg: str, value: Any) -> str:
        """The model as it appears in test ids and file names (made id-safe by the registry)."""
        return f"{self.name}-{arg}" if arg else self.name

    def price(self, value: Any, table: Any = None) -> tuple[Any, str | None]:
        """``(Price, note or None)``; raise PriceTableError when the run must not start."""
        from mltb_core.llm.prices import FREE

        return FREE, None

    def preflight(self, value: Any) -> list[str]:
        """What this model lacks before a run can start (missing key, package, file); [] when ready."""
        return []

    def describe(self, value: Any) -> str | None:
        """What the model string names, for a report (a pinned model file: its size and hash); None: the
        string says it all."""
        return None

    def reply_limit(self, value: Any) -> int | None:
        """Tokens a reply may run to when mltb sets the limit; None: the server's or the API's own."""
        return None

    def build(self, value: Any, *, model: str, seed: int, cache: Any, price_table: Any, **opts: Any) -> LLMBackend:
        raise NotImplementedError(f"backend {self.name!r} must implement build()")

    def worker_needs(self, value: Any) -> WorkerNeeds | None:
        """What every xdist worker needs of the machine to run this model (e.g. its own server), which caps
        the worker count; None: nothing per worker (an API is I/O bound, a synthetic policy cheap)."""
        return None

    def session_start(self, value: Any, workers: int, say: Callable[[str], None]) -> tuple[Any, list[str]]:
        """Start what the session's trials share (e.g. one server per xdist worker; ``workers`` is 0 without
        xdist), before any trial: ``(held, errors)``, where ``held`` goes to :meth:`session_end` and each
        error is reported (the run goes on; the trials it affects say it again). ``say`` gets progress lines."""
        return None, []

    def session_end(self, held: Any) -> None:
        """Stop what :meth:`session_start` returned, after the last trial."""


@dataclass(frozen=True)
class WorkerNeeds:
    """What one xdist worker needs to run a model (:meth:`BackendSpec.worker_needs`)."""

    memory: int | None             # bytes (None: not known yet, e.g. the model file is not on disk)
    cores: int = 1
    shared_memory: int = 0         # bytes needed once on the machine however many workers (a shared cache)
    what: str = "server"           # what each worker runs, for the session header ("llama.cpp server")


def backend(name: str) -> Callable[[type[BackendSpec]], type[BackendSpec]]:
    """Name a :class:`BackendSpec` subclass; the registry finds it through its entry point."""
    if not re.fullmatch(r"[a-z][a-z0-9_-]*", name or ""):
        raise ValueError(f"backend name {name!r} must be lower-case letters, digits, '_' or '-'")

    def name_it(cls: type[BackendSpec]) -> type[BackendSpec]:
        if not (isinstance(cls, type) and issubclass(cls, BackendSpec)):
            raise TypeError(f"@backend({name!r}) decorates a BackendSpec subclass, got {cls!r}")
        cls.name = name
        cls.forms = cls.forms or (name, f"{name}:<argument>")
        return cls
    return name_it


_registry: dict[str, BackendSpec] = {}
_loaded = False


def register_backend(spec: BackendSpec | type[BackendSpec], name: str | None = None) -> BackendSpec:
    """Register a backend (a spec or its class); the same spec twice is a no-op, another under a
    taken name an error (``plugins.claim``) unless its class says ``overrides = True``."""
    if isinstance(spec, type):
        spec = spec()
    if not isinstance(spec, BackendSpec):
        raise BackendRegistryError(f"a backend must be a BackendSpec, got {spec!r}")
    name = name or spec.name
    if not name:
        raise BackendRegistryError(f"{type(spec).__name__} has no name: decorate it with @backend('<name>')")
    if spec.name != name:
        raise BackendRegistryError(f"entry point {name!r} loads backend {spec.name!r}; the names must match")
    if type(_registry.get(name)) is type(spec):   # the same backend again: keep the one registered
        return _registry[name]
    return claim(_registry, "backend", name, spec, overrides=vars(type(spec)).get("overrides", False),
                 hint="set overrides = True on the new class to replace it deliberately", error=BackendRegistryError)


def _load_entry_points() -> None:
    global _loaded
    if _loaded:
        return
    for name, loaded in load_entry_points(ENTRY_POINT_GROUP, _BUILTIN_ENTRY_POINTS, BackendRegistryError):
        register_backend(loaded, name)
    _loaded = True


def reload_backends() -> None:
    """Forget what was loaded and read the entry points again (after installing a plug-in)."""
    global _loaded
    _registry.clear()
    _loaded = False


@contextmanager
def scoped_backends(*, empty: bool = False) -> Iterator[None]:
    """``with scoped_backends(): ...``: backends registered inside the block are forgotten at its end;
    ``empty=True`` starts the block with none registered and the entry points unread."""
    global _registry, _loaded
    saved = _registry, _loaded
    _registry = {} if empty else dict(_registry)
    if empty:
        _loaded = False
    try:
        yield
    finally:
        _registry, _loaded = saved


def available_backends() -> dict[str, BackendSpec]:
    _load_entry_points()
    return dict(sorted(_registry.items()))


def get_backend(name: str) -> BackendSpec | None:
    return available_backends().get(name)


def model_forms() -> list[str]:
    return [form for spec in available_backends().values() for form in spec.forms]


def builtin_model_forms() -> list[str]:
    """The forms of the backends this module defines, in name order, without loading any plug-in (for
    help texts built in every pytest run)."""
    builtins = [cls for cls in BackendSpec.__subclasses__() if cls.__module__ == __name__ and cls.name]
    return [form for cls in sorted(builtins, key=lambda cls: cls.name) for form in cls.forms]


@dataclass(frozen=True)
class ModelRef:
    """A parsed, validated model string, made once by a front end and passed along as is.

    ``kind`` is the backend (``openai``), ``arg`` the rest (``gpt-4o``), ``value`` the backend's parsed
    argument, ``text`` the original string (what records on disk keep; also ``str(ref)``), ``id`` the
    form for test ids and file names (``openai-gpt-4o``).
    """
    text: str
    kind: str
    arg: str
    value: Any
    spec: BackendSpec = field(repr=False, compare=False)

    def __str__(self) -> str:
        return self.text

    @property
    def id(self) -> str:
        return _id_safe(self.spec.model_id(self.arg, self.value)) or self.kind

    @property
    def synthetic(self) -> bool:
        return self.spec.synthetic

    def price(self, table: Any = None) -> tuple[Any, str | None]:
        return self.spec.price(self.value, table)

    def describe(self) -> str | None:
        return self.spec.describe(self.value)

    def reply_limit(self) -> int | None:
        return self.spec.reply_limit(self.value)

    def build(self, *, seed: int = 0, cache: Any = None, price_table: Any = None, **opts: Any) -> LLMBackend:
        return self.spec.build(self.value, model=self.text, seed=seed, cache=cache, price_table=price_table, **opts)


def parse_model(model: str) -> ModelRef:
    """Parse and validate ``model``; :class:`UnknownModelError` names the problem and the valid forms."""
    text = model.strip() if isinstance(model, str) else ""
    why = None
    if not text:
        why = "empty model string"
    else:
        kind, _, arg = text.partition(":")
        spec = get_backend(kind)
        if spec is None:
            why = f"no backend called {kind!r}{did_you_mean(kind, available_backends())}"
        else:
            try:
                return ModelRef(text, kind, arg, spec.parse(arg), spec)
            except ValueError as exc:
                why = str(exc)
    raise UnknownModelError(f"unknown model {model!r}: {why}. Valid forms: {', '.join(model_forms())}")


def parse_models(models: list[str]) -> list[ModelRef]:
    """Every model string parsed; one :class:`UnknownModelError` naming each bad one (the front ends'
    usage error)."""
    refs, problems = [], []
    for model in models:
        try:
            refs.append(parse_model(model))
        except UnknownModelError as exc:
            problems.append(str(exc))
    if problems:
        raise UnknownModelError("; ".join(problems))
    return refs


def as_model_ref(model: ModelRef | str) -> ModelRef:
    """``model`` as a :class:`ModelRef`: a parsed one as is, a string parsed (library callers, tests)."""
    return model if isinstance(model, ModelRef) else parse_model(model)


def model_id(model: ModelRef | str) -> str:
    """``model`` as it appears in test ids and file names: ``openai:gpt-4o`` → ``openai-gpt-4o``,
    ``sim:0.6`` → ``sim0.6``, ``local:/models/x.gguf`` → ``local-x``. A string no installed backend
    reads (a record of a plug-in not installed here) keeps its text, made id-safe: results of any
    backend can still be listed and named."""
    try:
        return as_model_ref(model).id
    except UnknownModelError:
        return _id_safe(str(model)) or "model"


def is_synthetic(model: ModelRef | str) -> bool:
    """True when ``model`` names a synthetic policy (not an LLM); False for unknown strings."""
    try:
        return as_model_ref(model).synthetic
    except UnknownModelError:
        return False


@dataclass
class Preflight:
    """What a run with these models lacks (``problems``: refuse to start) and should know (``notes``)."""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def preflight(models: list[ModelRef | str], price_table: Any = None) -> Preflight:
    """Check every model before a run: valid string, distinct ids, price, requirements (keys, packages, files)."""
    from mltb_core.llm.prices import PriceTableError

    result = Preflight()
    seen: dict[str, str] = {}
    for model in models:
        try:
            ref = as_model_ref(model)
        except UnknownModelError as exc:
            result.problems.append(str(exc))
            continue
        model = ref.text
        if seen.setdefault(ref.id, model) != model:
            result.problems.append(f"models {seen[ref.id]!r} and {model!r} share the id {ref.id!r}; "
                                   f"their results would mix")
        try:
            _, note = ref.price(price_table)
            if note:
                result.notes.append(note)
        except PriceTableError as exc:
            result.problems.append(str(exc))
        result.problems += [f"{model}: {why}" for why in ref.spec.preflight(ref.value)]
    return result


def _as_cache(cache: Any) -> Any:
    """``None``/``False`` → no cache; a ResponseCache as is; ``True`` → default dir; a path → that dir."""
    from mltb_core.llm.cache import ResponseCache

    if cache is None or cache is False:
        return None
    if isinstance(cache, ResponseCache):
        return cache if cache.enabled else None
    if cache is True:
        return ResponseCache()
    if isinstance(cache, (str, os.PathLike)):
        return ResponseCache(cache)
    raise TypeError(f"cache must be None, a bool, a directory or a ResponseCache, got {type(cache).__name__}")


def custom_openai_base_url() -> str | None:
    """``$OPENAI_BASE_URL`` when it points at a server other than OpenAI's (vLLM, llama.cpp, a proxy)."""
    from mltb_core.llm.openai_backend import is_custom_server

    url = (read_environment("OPENAI_BASE_URL") or "").strip()
    return url if is_custom_server(url) else None


# ------------------------------------------------------------------ the built-in backends
@backend("openai")
class OpenAISpec(BackendSpec):
    forms = ("openai:<model> (e.g. openai:gpt-4o)",)

    def parse(self, arg: str) -> str:
        if not arg.strip():
            raise ValueError("'openai:' needs a model id, e.g. openai:gpt-4o")
        return arg.strip()

    def price(self, value: str, table: Any = None) -> tuple[Any, str | None]:
        from mltb_core.llm.prices import FREE, PriceTable, UnknownPriceError, load_price_table

        table = table if isinstance(table, PriceTable) else load_price_table(table)
        try:
            return table.price(value), None
        except UnknownPriceError:
            server = custom_openai_base_url()
            if server is None:
                raise
            # A self-hosted model costs nothing per token; say so once rather than refuse to run.
            return FREE, f"openai:{value} has no price; counted at $0 on the custom server {server}"

    def preflight(self, value: str) -> list[str]:
        if read_environment("OPENAI_API_KEY") or custom_openai_base_url():
            return []
        return ["no API key: set OPENAI_API_KEY (or OPENAI_BASE_URL to an OpenAI-compatible server)"]

    def build(self, value: str, *, model: str, seed: int, cache: Any, price_table: Any, **opts: Any) -> LLMBackend:
        from mltb_core.llm.openai_backend import OpenAIBackend

        if "price" not in opts:
            opts["price"] = self.price(value, price_table)[0]
        return OpenAIBackend(value, seed=seed, cache=_as_cache(cache), **opts)


@backend("local")
class LocalSpec(BackendSpec):
    """``local`` (the default named model), ``local:<name>`` (a named model of llm/local/models.py) or
    ``local:/path/model.gguf``. The value is ``("name", name)`` or ``("path", path)``."""

    # named from the one table of named models (a table, not an implementation: cheap to import)
    forms = (f"local (= local:{_models.DEFAULT_LOCAL_MODEL})",
             f"local:<name> (named: {', '.join(sorted(_models.MODELS))})",
             "local:/path/model.gguf")

    def parse(self, arg: str) -> tuple[str, str]:
        from mltb_core.llm.local.models import DEFAULT_LOCAL_MODEL, MODELS   # read now: a test may swap the table

        if not arg or arg in MODELS:
            return ("name", arg or DEFAULT_LOCAL_MODEL)
        if re.search(r"[\\/]", arg) or arg.endswith(".gguf"):
            return ("path", arg)
        raise ValueError(f"no local model called {arg!r} (named models: {', '.join(sorted(MODELS))}; "
                         f"or a path to a .gguf file)")

    def model_id(self, arg: str, value: tuple[str, str]) -> str:
        kind, text = value
        if kind == "name":
            return f"local-{text}"
        return "local-" + re.split(r"[\\/]", text.rstrip("/\\"))[-1].removesuffix(".gguf")

    def describe(self, value: tuple[str, str]) -> str | None:
        """A named model: what it is, its file, size and SHA-256 (pinned); a file given by path: None (its
        record describes it)."""
        from mltb_core.llm.local.models import get_model

        kind, text = value
        if kind != "name":
            return None
        named = get_model(text)
        return f"{named.note.split(';')[0]}, `{named.filename}`, {named.size:,} bytes, SHA-256 `{named.sha256}`"

    def reply_limit(self, value: tuple[str, str]) -> int | None:
        """What the local backend sets (``models.reply_tokens_for`` of the model's file)."""
        from mltb_core.llm.local.models import get_model, reply_tokens_for

        kind, text = value
        return reply_tokens_for(get_model(text).filename if kind == "name" else text)

    def preflight(self, value: tuple[str, str]) -> list[str]:
        """llama.cpp installed; a named model's packages installed at their pins and its file assembled
        and hash-checked (here, before any trial: a bad file is a usage error, never a llama.cpp crash)."""
        from mltb_core.llm.local.backend import LocalModelUnavailable, _require_llama_cpp, resolve_model_path

        problems = []
        try:
            _require_llama_cpp()
        except LocalModelUnavailable as exc:
            problems.append(str(exc))
        try:
            resolve_model_path(value)
        except LocalModelUnavailable as exc:
            problems.append(str(exc))
        return problems

    def worker_needs(self, value: tuple[str, str]) -> WorkerNeeds:
        """Each worker runs its own llama.cpp server of this model: its file, KV cache and buffers, one core."""
        from mltb_core.llm.local.backend import PROMPT_CACHE_BYTES, worker_memory

        return WorkerNeeds(memory=worker_memory(value), cores=1, shared_memory=PROMPT_CACHE_BYTES,
                           what="llama.cpp server")

    def session_start(self, value: tuple[str, str], workers: int,
                      say: Callable[[str], None]) -> tuple[list[Any], list[str]]:
        """One server per xdist worker (each with its share of the cores, so each keeps its own warm prompt
        prefix), one without xdist; the servers are refcounted, so the workers' backends join them. A server
        that fails is an error; the others are kept (their workers' trials can run)."""
        import time

        from mltb_core.llm.local.backend import resolve_model_path, worker_servers

        path = resolve_model_path(value)  # preflight has checked (and assembled) the file by now
        servers = worker_servers(path, workers)
        say(f"mltb: local model {value[1]} ready ({path}, {path.stat().st_size / 1e9:.1f} GB, hash-checked); "
            f"starting {len(servers)} llama.cpp server(s)")
        held, errors = [], []
        for server in servers:
            started = time.monotonic()
            try:
                server.acquire()
            except Exception as exc:  # noqa: BLE001 - reported, and every trial on that worker says it again
                errors.append(f"local model server for {value[1]} failed to start: {exc}")
                continue
            held.append(server)
            say(f"mltb: llama.cpp server on port {server.port} answering after {time.monotonic() - started:.1f} s")
        return held, errors

    def session_end(self, held: list[Any]) -> None:
        for server in held:
            server.release()

    def build(self, value: tuple[str, str], *, model: str, seed: int, cache: Any, price_table: Any,
              **opts: Any) -> LLMBackend:
        from mltb_core.llm.local import LocalBackend

        return LocalBackend(value[1] if value[0] == "path" else None, named=value[1] if value[0] == "name" else None,
                            seed=seed, cache=_as_cache(cache), **opts)


@dataclass(frozen=True)
class SimSettings:
    """A sim model string's meaning: its skill, and whether the planner-input effects are neutral
    (``sim:<skill>:neutral``, assumption 8 of :mod:`mltb_core.llm.sim`)."""
    skill: float
    neutral: bool = False


SIM_NEUTRAL = "neutral"     # the word after the skill in a sim model string


@backend("sim")
class SimSpec(BackendSpec):
    forms = ("sim", "sim:<skill 0..1> (e.g. sim:0.7)", f"sim:<skill>:{SIM_NEUTRAL} (planner-input effects neutral; "
             "mltb_core/llm/sim.py)")
    synthetic = True
    default_skill = 0.7

    def parse(self, arg: str) -> SimSettings:
        text, _, flag = arg.partition(":")
        if text == SIM_NEUTRAL and not flag:       # sim:neutral: the default skill
            text, flag = "", SIM_NEUTRAL
        if flag and flag != SIM_NEUTRAL:
            raise ValueError(f"sim setting {flag!r} is not known; the one setting after the skill is {SIM_NEUTRAL!r}")
        if not text:
            return SimSettings(self.default_skill, bool(flag))
        try:
            skill = float(text)
        except ValueError:
            raise ValueError(f"sim skill {text!r} is not a number") from None
        if not 0.0 <= skill <= 1.0:
            raise ValueError(f"sim skill {skill} is outside [0, 1]")
        return SimSettings(skill, bool(flag))

    def model_id(self, arg: str, value: SimSettings) -> str:
        return f"sim{arg}"

    def build(self, value: SimSettings, *, model: str, seed: int, cache: Any, price_table: Any,
              **opts: Any) -> LLMBackend:
        from mltb_core.llm.sim import SimPolicy

        return SimPolicy(value.skill, seed, neutral=value.neutral, **opts)
