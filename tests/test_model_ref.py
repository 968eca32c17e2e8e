"""A model string is parsed once, at the front end, into a ModelRef that travels on; one case-id function
names every trial; records keep the model as its string."""
from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from pathlib import Path

import pytest

from mltb_core.analysis.estimate import estimate_cost
from mltb_core.analysis.reports import trial_page_name
from mltb_core.analysis.records import TrialRecord
from mltb_core.bench.tasks import get_task
from mltb_core.config import SETTINGS_BY_NAME, TrialConfig, case_id, is_case_id
from mltb_core.llm import backends
from mltb_core.llm.backends import BackendSpec, ModelRef, backend, parse_model, register_backend
from mltb_core.llm.prices import Price
from pytest_mltb.collection import build_cases, case_id_of_nodeid, case_marker_names, check_models, trial_config
from pytest_mltb.options import Settings, pytest_options

ROOT = Path(__file__).resolve().parents[1]
TASK = get_task("spaceship-titanic")


def test_a_model_ref_holds_the_kind_the_rest_the_string_and_a_file_safe_form():
    ref = parse_model("openai:org/model v2")
    assert (ref.kind, ref.arg, ref.text, ref.id, str(ref)) == ("openai", "org/model v2", "openai:org/model v2",
                                                             "openai-org-model-v2", "openai:org/model v2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ref.kind = "sim"    # frozen: what the front end parsed is what every later step sees


@pytest.fixture
def counted_parses(monkeypatch):
    calls = []
    real = backends.parse_model

    def counting(model):
        calls.append(model)
        return real(model)

    monkeypatch.setattr(backends, "parse_model", counting)
    return calls


def test_the_pytest_front_end_parses_each_model_once_and_passes_the_ref_along(counted_parses, tmp_path):
    defaults = {opt.name: opt.default for opt in pytest_options()}
    settings = Settings({**defaults, "model": "sim,sim:0.6", "max_llm_calls": 2})
    refs = settings.model_refs()
    assert settings.model_refs() is refs and counted_parses == ["sim", "sim:0.6"]
    cases = build_cases([TASK], ["react", "lats"], refs, 2)
    configs = [trial_config(settings, c.planner, c.model, c.trial) for c in cases]
    ids = [c.id for c in cases]
    markers = [case_marker_names(c) for c in cases]
    check_models(refs)
    from mltb_core.runner.trial import run_trial

    record = run_trial(TASK, configs[0], tmp_path)          # builds the backend, names the files
    assert counted_parses == ["sim", "sim:0.6"]               # nothing after the options parsed again
    assert all(isinstance(c.model, ModelRef) and c.model is cfg.model for c, cfg in zip(cases, configs))
    assert ids[0] == "spaceship-titanic-react-sim-t00" and ids[-1] == "spaceship-titanic-lats-sim0.6-t01"
    # trial outermost: every cell's first trial before any second one (a partial run stays balanced)
    assert [c.trial for c in cases] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [(c.planner, str(c.model)) for c in cases[:4]] == [(c.planner, str(c.model)) for c in cases[4:]]
    assert markers[0] == ("react", "sim", "spaceship_titanic")
    # the record keeps the model as its string; its case id is the item's and the trajectory's name
    assert record.model == "sim" and json.loads(json.dumps(record.to_dict()))["model"] == "sim"
    assert record.case_id == ids[0] == Path(record.trajectory).stem
    start = json.loads(Path(record.trajectory).read_text().splitlines()[0])
    assert start["config"]["model"] == "sim"


def test_a_bad_model_is_one_usage_error_naming_each():
    defaults = {opt.name: opt.default for opt in pytest_options()}
    with pytest.raises(pytest.UsageError, match=r"'gemini:pro'.*no backend called 'gemini'.*'sim:7'.*outside"):
        Settings({**defaults, "model": "sim,gemini:pro,sim:7"}).model_refs()


def test_mltb_run_parses_the_model_once(counted_parses, monkeypatch):
    from mltb_core import cli

    args = cli.build_parser().parse_args(["run", "--task", "t", "--planner", "react", "--model", "sim:0.3"])
    model = cli._model_ref(args.model)
    cli._check_model(model)
    config, _ = cli._trial_config(args, model)
    assert config.model is model and counted_parses == ["sim:0.3"]
    with pytest.raises(cli.UsageError, match="no backend called 'bogus'"):
        cli._model_ref("bogus:1")


def test_old_records_load_and_keep_their_model_string():
    # a record as an older mltb wrote it: no board/toolset/percentile_note, a backend not installed here
    old = {"task": "spaceship-titanic", "planner": "react", "model": "vllm:my/model", "trial": 2, "seed": 1,
           "config_hash": "abc123", "outcome": "valid", "valid": True}
    record = TrialRecord.from_dict(old)
    assert record.model == "vllm:my/model"
    assert record.case_id == "spaceship-titanic-react-vllm-my-model-t02"   # still named, never a crash
    assert trial_page_name(record) == f"{record.case_id}-abc123.html"
    assert TrialConfig("react", "sim:0.6").to_dict()["model"] == "sim:0.6"


def test_one_case_id_and_its_shape():
    ref = parse_model("local:/models/x.gguf")
    assert case_id("spaceship-titanic", "mcts_shaped", ref, 3) == "spaceship-titanic-mcts_shaped-local-x-t03"
    assert case_id("t", "react", "sim:0.6", 12) == case_id("t", "react", parse_model("sim:0.6"), 12)
    assert case_id("t", "react", "sim:0.6", 12) == "t-react-sim0.6-t12"
    assert is_case_id(case_id("a-b", "react", "openai:gpt-4o", 0))
    assert not any(map(is_case_id, ["1", "x-t1", "a b-t01", "test_x[a-t01]", "a/b-t01"]))
    assert case_id_of_nodeid("suites/test_challenges.py::test_challenge[t-react-sim-t00]") == "t-react-sim-t00"
    assert case_id_of_nodeid("tests/test_x.py::test_y[1]") is None and case_id_of_nodeid("tests/test_x.py::t") is None


def test_the_case_id_format_is_written_once():
    # the trial suffix ``-t{trial:02d}`` appears in one function; every other module calls it
    pattern = re.compile(r"-t\{[^}]*:02d\}")
    sources = sorted((ROOT / "mltb_core").rglob("*.py")) + sorted((ROOT / "pytest_mltb").rglob("*.py"))
    found = [p.relative_to(ROOT).as_posix() for p in sources if pattern.search(p.read_text())]
    assert found == ["mltb_core/config.py"]


def test_the_builtin_entry_points_are_those_pyproject_declares():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["mltb.backends"]
    assert declared == backends._BUILTIN_ENTRY_POINTS


def test_the_model_help_lists_the_backends_forms():
    text = SETTINGS_BY_NAME["model"].help
    for spec in (backends.OpenAISpec, backends.LocalSpec, backends.SimSpec):
        assert all(form in text for form in spec.forms)
    from mltb_core.llm.local.models import DEFAULT_LOCAL_MODEL, MODELS

    # the local forms name the models of the one table of named models
    assert all(name in text for name in MODELS) and f"local (= local:{DEFAULT_LOCAL_MODEL})" in text


def test_the_cost_estimate_asks_the_backend_for_its_price():
    with backends.scoped_backends():          # paidtest is forgotten afterwards
        @backend("paidtest")
        class Paid(BackendSpec):
            def price(self, value, table=None):
                return Price(1.0, 2.0), None

        register_backend(Paid)
        estimate = estimate_cost([(TASK, TrialConfig("react", "paidtest:x", max_llm_calls=3))])
        assert estimate is not None and estimate.calls == 3 and estimate.usd > 0
    assert estimate_cost([(TASK, TrialConfig("react", "sim", max_llm_calls=3))]) is None
