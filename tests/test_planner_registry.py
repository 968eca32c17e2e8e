"""Planners registered like backends (issue 19): the one registry rule, the ``mltb.planners`` entry points,
per-planner knobs hashed for their own planner only, and a planner from a separate package run end to end."""
from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import mltb_core
from mltb_core import config, environment
from mltb_core.analysis.resultsfile import read_records
from mltb_core.config import Range, TrialConfig, knob
from mltb_core.planners import ENTRY_POINT_GROUP, PLANNERS, Planner, planner_names, register
from mltb_core.planners.mcts import MCTSShaped
from mltb_core.planners.trajectory import read_trajectory
from mltb_core.plugins import NameClashError, RegistryError

ROOT = Path(mltb_core.__file__).resolve().parent.parent
BUILTINS = ["react", "lats", "mcts_outcome", "mcts_shaped", "hierarchical_mcts", "automind", "mle_star", "agent_k"]

# A third party's planner: ReAct under its own name, with a knob of its own that it writes to the trajectory.
PLUGIN = '''
from mltb_core.config import Range, knob
from mltb_core.planners.react import ReAct


class Mine(ReAct):
    name = "mine"
    knobs = (knob("mine_patience", 2, "steps mine waits (a third party's knob)", range=Range(int, 1)),)

    def search(self):
        self.ep.trajectory.write("mine_knobs", patience=self.config.knob("mine_patience"))
        return super().search()


class Impostor(ReAct):
    name = "react"
'''


@pytest.fixture
def scratch(monkeypatch):
    """Registrations made by the test are forgotten afterwards: the planner registry, the settings table
    and the environment declarations are copies for the test's duration."""
    for name in ("SETTINGS", "SETTINGS_BY_NAME", "_KNOBS", "_DECLARED", "_ORIGINS", "PLANNER_KNOBS"):
        table = getattr(config, name)
        monkeypatch.setattr(config, name, type(table)(table))
    monkeypatch.setattr(environment, "_DECLARED", dict(environment._DECLARED))
    with PLANNERS.scoped():
        yield


@pytest.fixture
def entry_points(scratch, monkeypatch, tmp_path):
    """Declare ``mltb.planners`` entry points (name, value) over the plug-in module above, as an installed
    package would; the registry reads them again on its next use."""
    (tmp_path / "mine_planner.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    declared: list = []
    real = metadata.entry_points

    def fake(**selection):
        found = list(real(**selection))
        if selection.get("group") == ENTRY_POINT_GROUP:
            found += [metadata.EntryPoint(name, value, ENTRY_POINT_GROUP) for name, value in declared]
        return found

    monkeypatch.setattr(metadata, "entry_points", fake)
    with PLANNERS.scoped(reread=True):
        yield declared


def hashes() -> dict[str, str]:
    return {name: TrialConfig(name, "sim").config_hash() for name in planner_names()}


# ------------------------------------------------------------------ knobs and the config hash
def test_a_knob_added_to_mcts_leaves_the_other_planners_hashes_unchanged(scratch, monkeypatch):
    before = hashes()
    probe = knob("probe_width", 2, "a throwaway MCTS knob", range=Range(int, 1))
    monkeypatch.setattr(MCTSShaped, "knobs", MCTSShaped.knobs + (probe,))
    register(MCTSShaped)            # the same class again: its knobs are read anew
    after = hashes()
    assert after["mcts_shaped"] != before["mcts_shaped"]
    assert {p: h for p, h in after.items() if p != "mcts_shaped"} == {p: h for p, h in before.items() if p != "mcts_shaped"}
    shaped = TrialConfig("mcts_shaped", "sim")
    assert shaped.knob("probe_width") == 2 and shaped.config_hash() != shaped.with_(probe_width=3).config_hash()
    assert TrialConfig("react", "sim").with_(probe_width=3).config_hash() == before["react"]


def test_a_planners_knob_is_a_setting_of_both_front_ends_and_reaches_the_config(scratch, monkeypatch):
    class Wide(MCTSShaped):
        name = "wide"
        knobs = (knob("probe_width", 2, "a throwaway knob", range=Range(int, 1, 9)),)

    register(Wide)
    setting = config.SETTINGS_BY_NAME["probe_width"]
    assert (setting.flag, setting.ini, setting.env) == ("--probe-width", "mltb_probe_width", "MLTB_PROBE_WIDTH")
    assert setting in config.settings_for("pytest") and setting in config.settings_for("run")
    assert setting.help_text().startswith("wide: a throwaway knob; an integer from 1 to 9 [default: 2]")
    assert "wide" in config.SETTINGS_BY_NAME["planner"].help_text()      # --planner lists the registry
    monkeypatch.setenv("MLTB_PROBE_WIDTH", "5")
    values, sources = config.resolve_settings(config.settings_for("pytest"), {},
                                              config.read_environment(config.settings_for("pytest")))
    assert sources["probe_width"] == "env"
    assert TrialConfig("wide", "sim", **config.trial_fields(values)).knob("probe_width") == 5
    with pytest.raises(config.SettingValueError, match="MLTB_PROBE_WIDTH: 10 is not allowed"):
        config.resolve_settings(config.settings_for("pytest"), {}, {"probe_width": "10"})


def test_mltb_run_takes_a_planners_knob_checks_it_and_hands_it_to_the_config(capsys):
    from mltb_core import cli

    argv = ["run", "--task", "spaceship-titanic", "--planner", "automind", "--model", "sim"]
    args = cli.build_parser().parse_args([*argv, "--num-drafts", "5"])
    config_, _ = cli._trial_config(args, cli._model_ref(args.model))
    assert config_.knob("num_drafts") == 5 and config_.planner_knobs()["num_drafts"] == 5
    assert cli.main([*argv, "--num-drafts", "0"]) == 2
    assert "bad value for --num-drafts: 0 is not allowed: expected an integer >= 1" in capsys.readouterr().err


def test_a_knob_may_not_take_a_settings_or_another_planners_knob_name(scratch):
    class Seeded(Planner):
        name = "seeded"
        knobs = (knob("seed", 1, "clashes with the run's seed"),)

    class Drafty(Planner):
        name = "drafty"
        knobs = (knob("num_drafts", 1, "clashes with automind's and mle_star's"),)

    with pytest.raises(NameClashError, match="setting name 'seed' is claimed by both the settings table"):
        register(Seeded)
    with pytest.raises(NameClashError, match=r"'num_drafts' is claimed by both mltb_core\.planners\.automind\."
                                             r"SolutionSearch and .*Drafty"):
        register(Drafty)
    assert "seeded" not in PLANNERS and "drafty" not in PLANNERS     # a refused planner leaves no trace


# ------------------------------------------------------------------ the registry rule
def test_a_clashing_planner_name_is_refused_naming_both_origins_unless_it_overrides(scratch):
    class Impostor(Planner):
        name = "react"

    with pytest.raises(NameClashError, match=r"planner name 'react' is claimed by both mltb_core\.planners\.react"
                                             r"\.ReAct and .*Impostor; set overrides = True"):
        register(Impostor)
    assert PLANNERS["react"].__name__ == "ReAct"
    register(Impostor, overrides=True)
    assert PLANNERS["react"] is Impostor and planner_names() == BUILTINS     # replaced in place


def test_tools_follow_the_same_rule():
    from mltb_core.toolkit.registry import ToolRegistry, make_set_tool

    tools = ToolRegistry()

    @make_set_tool(roles=("loading",), registry=tools, name="load_it")
    def first() -> int:
        return 1

    with pytest.raises(NameClashError, match=r"tool name 'load_it' is claimed by both .*first and .*second"):
        @make_set_tool(roles=("loading",), registry=tools, name="load_it")
        def second() -> int:
            return 2

    @make_set_tool(roles=("loading",), registry=tools, name="load_it", overrides=True)
    def third() -> int:
        return 3

    assert tools.get("load_it").func is third


def test_builtins_come_in_the_tables_order_and_entry_point_planners_after_them(entry_points):
    from mltb_core.analysis.tables import planner_rank

    entry_points.append(("mine", "mine_planner:Mine"))
    assert planner_names() == [*BUILTINS, "mine"]
    assert sorted(["mine", "gone_plugin", "agent_k", "react"], key=planner_rank) == ["react", "agent_k", "mine",
                                                                                    "gone_plugin"]
    assert config.SETTINGS_BY_NAME["mine_patience"].planners == ("mine",)


@pytest.mark.parametrize("name, value, words", [
    ("react", "mine_planner:Impostor", [r"planner name 'react' is claimed by both mltb_core\.planners\.react\.ReAct "
                                        r"and mine_planner\.Impostor"]),
    ("gone", "no_such_module_for_mltb:Planner", [r"gone = 'no_such_module_for_mltb:Planner' \(group mltb\.planners\) "
                                                 r"failed to load"]),
    ("other", "mine_planner:Mine", [r"'other' loads mine_planner\.Mine named 'mine'; the names must match"]),
    ("bare", "os:getcwd", ["not a mltb_core.planners.Planner subclass"]),
])
def test_a_bad_entry_point_is_an_error_naming_it(entry_points, name, value, words):
    entry_points.append((name, value))
    with pytest.raises(RegistryError, match=words[0]):
        planner_names()


# ------------------------------------------------------------------ a planner in its own package
def _install(site: Path) -> None:
    """What `pip install` of a one-module package leaves: the module and its dist-info with the entry point."""
    (site / "mine_planner.py").write_text(PLUGIN)
    info = site / "mine_planner-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mine-planner\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nmine = mine_planner:Mine\n")


def test_a_planner_from_another_package_runs_under_the_suite_and_shows_in_the_tables(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install(site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    pytest_ = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist"]
    shown = subprocess.run([*pytest_, "--help"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert "--mine-patience=MINE_PATIENCE" in shown.stdout and "mine: steps mine waits" in shown.stdout
    run = tmp_path / "run"
    done = subprocess.run([*pytest_, "suites/", "--planner=mine", "--model=sim", "--task=spaceship-titanic",
                           "--trials=1", "--max-llm-calls=6", "--mine-patience=3", f"--mltb-out={run}"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode in (0, 1), out[-3000:]          # 1: the trial ran but its submission was not valid
    (record,) = read_records(run / "results.jsonl")
    assert record.planner == "mine" and record.outcome != "infra_error", (record.outcome, record.error)
    summary = done.stdout.split("mltb summary", 1)[1]
    assert sum(" mine " in f" {line} " for line in summary.splitlines()) >= 2, summary   # in more than one table
    knobs = [step for step in read_trajectory(run / record.trajectory) if step.get("step_type") == "mine_knobs"]
    assert knobs and knobs[0]["patience"] == 3                 # the knob's value reached the planner
