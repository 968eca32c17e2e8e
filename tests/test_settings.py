"""The one settings table (mltb_core.config.SETTINGS): both front ends are generated from it."""
from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import fields

import pytest

from mltb_core import cli
from mltb_core.config import (SETTINGS, SETTINGS_BY_NAME, TRIAL_SETTINGS, SettingValueError, TrialConfig,
                              read_environment, resolve_settings, settings_for, trial_fields)

pytest_plugins = ["pytester"]


def help_defaults(text: str) -> dict[str, str]:
    """Flag -> the ``[default: X]`` its help shows, from the ``--help`` text of pytest or argparse.

    An option entry starts on a line indented by two spaces with its flags; its help runs until the next
    entry, wrapped (textwrap also breaks after hyphens, so the pieces are re-joined).
    """
    found: dict[str, str] = {}
    flags: list[str] = []
    body: list[str] = []

    def close() -> None:
        joined = re.sub(r"(?<=\w-) (?=\w)", "", " ".join(" ".join(body).split()))
        marker = re.search(r"\[default: ([^\]]*)\]", joined)
        for flag in flags:
            if marker:
                found[flag] = marker.group(1)

    for line in text.splitlines():
        entry = re.match(r"^  (-\w[ =]\S+, |-\w, )?(--[a-z][\w-]*)", line)
        if entry:
            close()
            head, _, rest = line.strip().partition("  ")
            flags, body = re.findall(r"--[a-z][\w-]*", head), [rest]
        else:
            body.append(line)
    close()
    return found


def expected(front_end: str) -> dict[str, str]:
    return {s.flag: s.default_text for s in settings_for(front_end)}


def test_names_flags_env_and_ini_keys_are_unique():
    for spelling in ("name", "flag", "env", "ini"):
        values = [getattr(s, spelling) for s in SETTINGS]
        assert len(values) == len(set(values)), spelling


def test_every_trial_setting_is_a_trial_config_field_and_shows_its_default():
    names = {f.name: f for f in fields(TrialConfig)}
    for setting in TRIAL_SETTINGS:
        assert setting.field in names and names[setting.field].default == setting.default
    assert SETTINGS_BY_NAME["max_cost"].field == "max_cost_usd"          # the flag keeps its short name
    assert SETTINGS_BY_NAME["llm_cache"].flag == "--llm-cache" and SETTINGS_BY_NAME["llm_cache"].no_flag == "--no-llm-cache"


def test_mltb_run_and_pytest_help_list_the_same_trial_options_and_defaults(pytester):
    run_help = subprocess.run([sys.executable, "-m", "mltb_core.cli", "run", "--help"], capture_output=True,
                              text=True, check=True).stdout
    pytest_help = pytester.runpytest_subprocess("--help").stdout.str()
    shared = {s.flag: s.default_text for s in SETTINGS if set(s.front_ends) == {"pytest", "run"}}
    run_found, pytest_found = help_defaults(run_help), help_defaults(pytest_help)
    assert {f: run_found.get(f) for f in shared} == shared
    assert {f: pytest_found.get(f) for f in shared} == shared
    # every setting of each front end is in its help, with the table's default
    assert {f: run_found.get(f) for f in expected("run")} == expected("run")
    assert {f: pytest_found.get(f) for f in expected("pytest")} == expected("pytest")
    # the trial options the issue found missing from one front end, and the one cache flag spelling
    for flag in ("--exploration", "--temperature", "--threads", "--max-features", "--no-llm-cache",
                 "--no-reward-shaping", "--reward-shaping"):
        assert flag in run_help and flag in pytest_help, flag
    assert "--no-cache " not in run_help and "[default: mltb-runs/<timestamp>]" in " ".join(run_help.split())


def test_precedence_is_cli_then_env_then_ini_then_default():
    settings = [SETTINGS_BY_NAME[n] for n in ("max_iterations", "temperature", "toolset", "board")]
    ini = {"mltb_max_iterations": "7", "mltb_temperature": "0.2", "mltb_toolset": "extended"}.get
    env = read_environment(settings, {"MLTB_MAX_ITERATIONS": "5", "MLTB_TEMPERATURE": "0.3", "MLTB_OTHER": "x"})
    values, sources = resolve_settings(settings, {"max_iterations": "3"}, env, ini)
    assert values == {"max_iterations": 3, "temperature": 0.3, "toolset": "extended", "board": "public"}
    assert sources == {"max_iterations": "cli", "temperature": "env", "toolset": "ini", "board": "default"}


@pytest.mark.parametrize("name, raw, where, words", [
    ("max_iterations", "0", "--max-iterations", ["an integer >= 1"]),
    ("temperature", "hot", "--temperature", ["'hot'", "a number from 0 to 2"]),
    ("board", "final", "--board", ["'final'", "public, private"]),
    ("reward_shaping", "maybe", "--reward-shaping", ["'maybe'", "not a boolean"]),
])
def test_a_bad_value_names_where_it_came_from(name, raw, where, words):
    setting = SETTINGS_BY_NAME[name]
    with pytest.raises(SettingValueError) as cli_error:
        resolve_settings([setting], {name: raw}, {})
    with pytest.raises(SettingValueError) as env_error:
        resolve_settings([setting], {}, {name: raw})
    assert cli_error.value.where == where and env_error.value.where == setting.env
    for word in words:
        assert word in str(cli_error.value)


def test_switches_from_the_environment_reach_the_trial_config():
    settings = settings_for("run")
    values, _ = resolve_settings(settings, {}, read_environment(settings, {"MLTB_LLM_CACHE": "off",
                                                                         "MLTB_TOOL_MASKING": "0"}))
    config = TrialConfig("react", "sim", **trial_fields(values))
    assert config.llm_cache is False and config.tool_masking is False and config.reward_shaping is None


def test_mltb_run_reads_the_same_environment_and_switches_both_ways(monkeypatch):
    parser = cli.build_parser()
    args = parser.parse_args(["run", "--task", "t", "--planner", "react", "--model", "sim", "--reward-shaping",
                              "--no-feedback", "--temperature", "0.1"])
    monkeypatch.setenv("MLTB_TEMPERATURE", "0.9")
    monkeypatch.setenv("MLTB_MAX_ITERATIONS", "4")
    config, values = cli._trial_config(args, cli._model_ref(args.model))
    assert (config.reward_shaping, config.feedback, config.temperature, config.max_iterations) == (True, False, 0.1, 4)
    assert values["out"] is None   # cmd_run then picks mltb-runs/<timestamp>, like pytest
    assert cli.default_out_dir().parent.name == "mltb-runs"


def test_tasks_dir_is_a_path_list_like_mltb_tasks_dir(tmp_path):
    # MLTB_TASKS_DIR is both the setting's variable and load_tasks' own: a pathsep list in both readings
    import os

    from pytest_mltb.options import Settings

    first, second = tmp_path / "a", tmp_path / "b"
    assert Settings({"tasks_dir": f"{first}{os.pathsep}{second}"}).task_dirs == [str(first), str(second)]
    assert Settings({"tasks_dir": None}).task_dirs == []


def test_every_mltb_variable_the_core_names_is_in_the_table():
    # a variable read somewhere in mltb_core is a setting's or listed (with its meaning) in config.ENVIRONMENT
    from pathlib import Path

    import mltb_core
    from mltb_core.config import ENVIRONMENT

    known = {s.env for s in SETTINGS} | {v.name for v in ENVIRONMENT}
    named = {name for path in Path(mltb_core.__file__).parent.rglob("*.py")
             for name in re.findall(r"[\"'](MLTB_[A-Z_]+)[\"']", path.read_text(encoding="utf-8"))}
    assert named and named <= known, sorted(named - known)


def test_a_gate_preset_fills_in_what_the_user_left_unset_and_nothing_else():
    from mltb_core.config import GATE_PRESETS, IMPLICIT_SOURCES

    preset = GATE_PRESETS["ci"]
    settings = settings_for("pytest")
    values, sources = resolve_settings(settings, {"gate_preset": "ci", "planner": "react"},
                                       read_environment(settings, {"MLTB_TRIALS": "2"}))
    assert values["planner"] == "react" and sources["planner"] == "cli"       # the planner that changed
    assert values["trials"] == 2 and sources["trials"] == "env"
    assert values["model"] == preset["model"] and sources["model"] == "preset"
    assert values["task"] == preset["task"] and values["max_llm_calls"] == int(preset["max_llm_calls"])
    assert values["seed"] == int(preset["seed"]) and sources["seed"] == "preset"
    assert sources["temperature"] == "default"                                # not in the preset
    plain, plain_sources = resolve_settings(settings, {}, {})                 # no preset named: none applies
    assert set(plain_sources.values()) <= set(IMPLICIT_SOURCES), plain_sources
    assert plain["model"] != preset["model"] and plain["task"] != preset["task"]


def test_every_preset_option_is_a_setting_whose_parser_accepts_it():
    from mltb_core.config import GATE_PRESETS

    for name, preset in GATE_PRESETS.items():
        for option, raw in preset.items():
            assert "pytest" in SETTINGS_BY_NAME[option].front_ends, (name, option)
            SETTINGS_BY_NAME[option].parse(raw, f"--gate-preset {name}")   # raises on a typo


def test_an_unknown_gate_preset_is_a_usage_error():
    with pytest.raises(SettingValueError, match="'nightly'.*ci"):
        resolve_settings(settings_for("pytest"), {"gate_preset": "nightly"}, {})


def test_the_ci_preset_selects_its_items_and_a_narrower_planner_wins(pytester):
    from mltb_core.config import GATE_PRESETS

    pytester.makepyfile(test_challenges='''
def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)
''')
    preset = GATE_PRESETS["ci"]
    tasks, trials = preset["task"].split(","), int(preset["trials"])
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--gate-preset=ci", "--planner=react,lats",
                                          "--collect-only", "-q")
    ids = [line for line in result.stdout.lines if "::test_challenge[" in line]
    assert len(ids) == len(tasks) * 2 * trials, result.stdout.str()
    assert all("-sim-t" in i for i in ids) and {i.split("[")[1].split("-react")[0].split("-lats")[0]
                                                for i in ids} == set(tasks)


def test_a_planner_knob_in_the_ini_file_is_read_without_warnings(pytester):
    """An ``mltb_*`` ini key makes the plugin add the planners' knobs before the ini is checked, and
    listing the ini keys uses no API pytest deprecates (9.2 warned about ``config.inicfg`` on every run)."""
    from tests.test_input_limits import SUITE, TASK

    pytester.makeini("[pytest]\nmltb_expansion_k = 2\n")
    pytester.makepyfile(test_challenges=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", f"--task={TASK}",
                                           "--model=sim", "--planner=mcts_shaped", "-W", "always")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.OK, text[-3000:]
    assert "inicfg" not in text and "Unknown config option" not in text, text[-3000:]
