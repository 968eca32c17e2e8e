"""The backend registry: one parse, one id, one price and one preflight per model string; third-party
backends through the ``mltb.backends`` entry-point group, exactly like the built-ins."""
from __future__ import annotations

import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from mltb_core.config import TrialConfig
from mltb_core.bench.tasks import get_task
from mltb_core.llm import MODEL_FORMS, UnknownModelError, make_backend
from mltb_core.llm import backends
from mltb_core.llm.backends import (ENTRY_POINT_GROUP, BackendRegistryError, BackendSpec, backend, is_synthetic,
                                    model_id, parse_model, preflight, register_backend, reload_backends)
from mltb_core.llm.prices import FREE, UnknownPriceError, load_price_table
from mltb_core.config import case_id
from mltb_core.runner.trial import run_trial

pytest_plugins = ["pytester"]

PLUGIN = '''
from mltb_core.llm import BackendSpec, backend
from scripted import ScriptedBackend, spaceship_pipeline


@backend("replay")
class ReplaySpec(BackendSpec):
    """A replayed pipeline: ``replay`` submits, ``replay:nosubmit`` stops before the submission."""
    forms = ("replay", "replay:nosubmit")

    def parse(self, arg):
        if arg not in ("", "nosubmit"):
            raise ValueError(f"replay takes no argument or 'nosubmit', got {arg!r}")
        return arg != "nosubmit"

    def build(self, value, *, model, seed, cache, price_table, **opts):
        llm = ScriptedBackend(spaceship_pipeline(submit=value))
        llm.name = model
        return llm
'''


@pytest.fixture
def fresh_registry(monkeypatch):
    """An empty registry for this test; afterwards the previous one (with backends other test modules
    registered at import, such as ``scripted``) comes back untouched."""
    with backends.scoped_backends(empty=True):
        yield


@pytest.fixture
def plugin_entry_point(tmp_path, monkeypatch, fresh_registry):
    """Install a third-party backend the way a package would: a module plus an entry point."""
    (tmp_path / "mltb_replay_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    real = metadata.entry_points

    def entry_points(**selection):
        found = list(real(**selection))
        if selection.get("group") == ENTRY_POINT_GROUP:
            found.append(metadata.EntryPoint("replay", "mltb_replay_plugin:ReplaySpec", ENTRY_POINT_GROUP))
        return found

    monkeypatch.setattr(metadata, "entry_points", entry_points)


@pytest.fixture
def no_openai_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MLTB_PRICES"):
        monkeypatch.delenv(name, raising=False)


# ------------------------------------------------------------------ built-ins
@pytest.mark.parametrize("model, ident", [
    ("sim", "sim"), ("sim:0.6", "sim0.6"), ("local", "local-qwen2.5-coder-1.5b"), ("local:smollm2", "local-smollm2"),
    ("local:/models/x.gguf", "local-x"),
    ("openai:gpt-4o", "openai-gpt-4o"), ("openai:org/model v2", "openai-org-model-v2"),
])
def test_one_model_id_for_test_ids_and_trajectory_files(model, ident):
    assert model_id(model) == ident
    config = TrialConfig(planner="react", model=model)
    # the string and its parsed form give one id (the trial's file names once said local-models-x.gguf)
    assert case_id("spaceship-titanic", "react", config.model, 0) == case_id("spaceship-titanic", "react", model, 0)
    assert f"-{ident}-" in case_id("spaceship-titanic", "react", config.model, 0)


@pytest.mark.parametrize("model, words", [
    ("sim:2", ["sim:2", "outside [0, 1]"]), ("sim:high", ["'high' is not a number"]),
    ("openai:", ["needs a model id"]), ("gemini:pro", ["no backend called 'gemini'"]), ("  ", ["empty"]),
])
def test_bad_model_strings_name_the_problem_and_the_valid_forms(model, words):
    with pytest.raises(UnknownModelError) as caught:
        parse_model(model)
    for word in [*words, "Valid forms", "openai:<model>", "sim:<skill"]:
        assert word in str(caught.value)


def test_only_the_sim_is_synthetic():
    assert is_synthetic("sim") and is_synthetic("sim:0.3")
    assert not is_synthetic("openai:gpt-4o") and not is_synthetic("local") and not is_synthetic("bogus:x")


def test_the_builtins_are_found_through_the_entry_point_group(monkeypatch, fresh_registry):
    """The built-ins are looked up like any plug-in: take the group away and they are gone."""
    monkeypatch.setattr(backends, "_BUILTIN_ENTRY_POINTS", {})
    monkeypatch.setattr(metadata, "entry_points", lambda **selection: [])
    with pytest.raises(UnknownModelError, match="no backend called 'sim'"):
        parse_model("sim")


# ------------------------------------------------------------------ third-party backends
def test_a_plugin_backend_runs_a_trial_through_the_same_path(tmp_path, plugin_entry_point):
    assert "replay:nosubmit" in MODEL_FORMS or "replay:nosubmit" in backends.model_forms()
    with pytest.raises(UnknownModelError, match="replay takes no argument or 'nosubmit', got 'x'"):
        parse_model("replay:x")
    assert model_id("replay:nosubmit") == "replay-nosubmit" and not is_synthetic("replay")
    config = TrialConfig(planner="react", model="replay", llm_cache=False, max_iterations=30)
    record = run_trial(get_task("spaceship-titanic"), config, tmp_path / "run")
    assert record.outcome == "valid", (record.stop_reason, record.error)
    assert record.model == "replay" and not record.synthetic and record.cost_usd == 0
    assert Path(record.trajectory).name == "spaceship-titanic-react-replay-t00.jsonl"


def test_reload_forgets_what_was_registered_and_reads_the_entry_points_again(fresh_registry):
    @backend("ephemeral")
    class Ephemeral(BackendSpec):
        pass

    register_backend(Ephemeral)
    assert "ephemeral" in backends.available_backends()
    reload_backends()
    found = backends.available_backends()
    assert "ephemeral" not in found and {"sim", "openai", "local"} <= set(found)


def test_a_plugin_may_not_take_a_builtin_name(fresh_registry):
    @backend("sim")
    class Impostor(BackendSpec):
        pass

    backends.available_backends()
    with pytest.raises(BackendRegistryError, match="'sim' is claimed by both"):
        register_backend(Impostor)


def test_a_broken_entry_point_names_itself(monkeypatch, fresh_registry):
    real = metadata.entry_points
    broken = metadata.EntryPoint("broken", "no_such_module_for_mltb:Spec", ENTRY_POINT_GROUP)
    monkeypatch.setattr(metadata, "entry_points",
                        lambda **sel: [*real(**sel), broken] if sel.get("group") == ENTRY_POINT_GROUP else real(**sel))
    with pytest.raises(BackendRegistryError, match="broken = 'no_such_module_for_mltb:Spec'.*failed to load"):
        parse_model("sim")


def test_backend_names_are_checked():
    with pytest.raises(ValueError, match="lower-case"):
        backend("My Backend")
    with pytest.raises(TypeError, match="BackendSpec subclass"):
        backend("ok")(object)


# ------------------------------------------------------------------ preflight and prices
def test_missing_api_key_is_a_preflight_problem(no_openai_env):
    checked = preflight(["openai:gpt-4o", "sim"])
    assert checked.problems == ["openai:gpt-4o: no API key: set OPENAI_API_KEY (or OPENAI_BASE_URL to an "
                                "OpenAI-compatible server)"]


def test_missing_api_key_is_one_usage_error_at_collection(pytester, no_openai_env):
    pytester.makepyfile(test_challenges="def test_challenge(mltb_case, mltb_record, mltb_check):\n"
                                        "    mltb_check(mltb_record)\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--task=spaceship-titanic",
                                          "--planner=react,lats", "--trials=3", "--model=openai:gpt-4o-mini")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text[-2000:]
    assert text.count("no API key") == 1 and "ERROR" not in result.stdout.str(), text[-2000:]


def test_unpriced_model_on_a_custom_server_runs_free_with_a_note(no_openai_env, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    checked = preflight(["openai:my-vllm-model"])
    assert checked.problems == []
    assert checked.notes == ["openai:my-vllm-model has no price; counted at $0 on the custom server "
                             "http://127.0.0.1:8000/v1"]
    llm = make_backend("openai:my-vllm-model")
    assert llm.price == FREE
    # a priced model keeps its price on the custom server too
    assert make_backend("openai:gpt-4o").price == load_price_table().price("gpt-4o")


def test_unpriced_model_on_openai_itself_is_refused(no_openai_env, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    checked = preflight(["openai:my-vllm-model"])
    assert len(checked.problems) == 1 and "'my-vllm-model' has no price" in checked.problems[0]
    with pytest.raises(UnknownPriceError):
        make_backend("openai:my-vllm-model")


def test_user_price_table_extends_the_bundled_one(tmp_path, monkeypatch):
    bundled = load_price_table()
    mine = tmp_path / "mine.toml"
    mine.write_text(textwrap.dedent('''
        [models."gpt-9"]
        input = 1.0
        output = 2.0
        [models."gpt-4o"]
        input = 0.5
        output = 0.5
    '''))
    monkeypatch.setenv("MLTB_PRICES", str(mine))
    table = load_price_table()
    assert table.price("gpt-9").input_per_m == 1.0                     # added
    assert table.price("gpt-4o").output_per_m == 0.5                   # replaced by name
    assert table.price("gpt-4.1-mini") == bundled.price("gpt-4.1-mini")  # kept
    assert set(bundled.prices) < set(table.prices)


def test_local_preflight_names_the_missing_model_file(tmp_path):
    missing = tmp_path / "nowhere.gguf"
    checked = preflight([f"local:{missing}"])
    assert any(f"local model file {missing} does not exist" in p for p in checked.problems), checked.problems


def test_two_models_with_one_id_are_refused():
    checked = preflight(["local:/a/x.gguf", "local:/b/x.gguf"])
    assert any("share the id 'local-x'" in p for p in checked.problems), checked.problems
