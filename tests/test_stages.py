"""The stage list (stages/specs.py) is the one home of the stage count and names: the tables keyed by stage
follow it (or fail at import), the front ends print its count, and the prompts stay byte-identical."""
import hashlib
import json
import subprocess
import sys

import pytest

from mltb_core.analysis.records import TrialRecord
from mltb_core.stages import specs as stages
from mltb_core.stages.specs import REWARD_STAGES, STAGE_COUNT, STAGE_NAMES, StageTableError, by_stage, stage_label

# sha256 of json.dumps(prompts.all_prompts(), indent=2, sort_keys=True): prompts are cached by their text and
# documented, so a refactoring must not change a byte. First measured on main 4931607 before the stage tables
# were keyed by REWARD_STAGES; re-pinned deliberately (issue 33) when the stage's parameter note was added and
# LATS's reflection prompt stopped saying the trajectory "ended" (it now comes at a budget-derived depth);
# re-pinned (issue 60) when the listing's Agent K stage request showed "<count>" for the stage count and lost
# the tune request no planner sent; re-pinned (issue 60) when the stage checks' feedback templates moved into
# prompts and the listing gained "stage_feedback" (every other entry unchanged: without it, e2868d3f...).
# re-pinned (issue 62) when the stage note moved from the end of every proposal request to after the step where
# it changed (message_order says so), so that along a path each request extends the previous one; re-pinned
# (issue 62) when the listing gained "bounded_context" (--context-budget; every other entry unchanged: fc9fb7e7...),
# and when message_order said that a note the very next step's note replaces is dropped.
PROMPTS_SHA256 = "23f036e5b573b813eaec03b25e708c62e3a107843a92307440ced6630c3fb08b"


def test_the_prompts_are_byte_identical_to_before():
    from mltb_core.llm import prompts

    text = json.dumps(prompts.all_prompts(), indent=2, sort_keys=True)
    assert hashlib.sha256(text.encode()).hexdigest() == PROMPTS_SHA256
    assert prompts.stage_request("t", 3, 10, "").startswith("Stage 3 of 10: t.")


def test_the_stage_tables_are_keyed_by_the_stage_list_in_its_order():
    from mltb_core.llm.prompts import STAGE_FEEDBACK, SUBTASK_PREFIXES
    from mltb_core.stages.rewards import CHECKS

    assert tuple(SUBTASK_PREFIXES) == STAGE_NAMES == tuple(CHECKS) == tuple(STAGE_FEEDBACK)
    assert [s.feedback for s in REWARD_STAGES] == list(STAGE_FEEDBACK.values())


def test_every_feedback_template_is_one_the_checks_fill_in():
    # the feedback texts live in prompts and the checks name them by key: a template no check names any more is
    # dead text in the documented prompts, and a field that is not a plain name would not fill in
    import inspect
    import string

    from mltb_core.llm import prompts
    from mltb_core.stages import rewards

    source = inspect.getsource(rewards) + inspect.getsource(prompts.feedback_list)
    tables = {"stage": [t for table in prompts.STAGE_FEEDBACK.values() for t in table.items()],
              "call": list(prompts.FEEDBACK_CALLS.items()), "part": list(prompts.FEEDBACK_PARTS.items())}
    unused = [key for kind, items in tables.items() for key, _ in items if f'"{key}"' not in source]
    assert unused == []
    def fields(template):
        names = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
        assert all(name.isidentifier() for name in names), (template, names)
        return {name: "x" for name in names}

    # filled in through the functions the checks call: a field may share a parameter's name ("name")
    for stage_name, table in prompts.STAGE_FEEDBACK.items():
        for situation, template in table.items():
            assert "{" not in prompts.stage_feedback(stage_name, situation, **fields(template))
    for key, template in prompts.FEEDBACK_CALLS.items():
        assert "{" not in prompts.feedback_call(key, **fields(template))
    for key, template in prompts.FEEDBACK_PARTS.items():
        assert "{" not in prompts.feedback_part(key, **fields(template))
    everything = prompts.all_prompts()["stage_feedback"]
    assert everything["stages"] is prompts.STAGE_FEEDBACK and everything["calls"] is prompts.FEEDBACK_CALLS
    assert prompts.feedback_list(["a", "b"]) == "['a', 'b']"
    assert prompts.feedback_list(list("abc"), limit=2) == "['a', 'b', ... (3 in all)]"
    assert [s.number for s in REWARD_STAGES] == list(range(1, STAGE_COUNT + 1))


def test_by_stage_refuses_a_missing_or_unknown_stage_and_names_it():
    table = {name: name.upper() for name in reversed(STAGE_NAMES)}
    assert list(by_stage(table, "t")) == list(STAGE_NAMES)        # reordered to stage order
    del table["modeling"]
    table["modelling"] = "typo"
    with pytest.raises(StageTableError, match=r"my\.TABLE .*missing \['modeling'\].*unknown \['modelling'\]"):
        by_stage(table, "my.TABLE")


def test_a_prompt_table_without_a_stage_fails_loudly_at_import():
    # a fresh interpreter whose prompt table lost a stage: the stage specs refuse to load
    code = ("from mltb_core.llm import prompts\n"
            "prompts.SUBTASK_PREFIXES['ensembling'] = prompts.SUBTASK_PREFIXES.pop('modeling')\n"
            "import mltb_core.stages.specs\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "StageTableError" in done.stderr and "prompts.SUBTASK_PREFIXES must have one entry per stage" in done.stderr
    assert "missing ['modeling']" in done.stderr and "unknown ['ensembling']" in done.stderr


def test_a_new_stage_without_a_check_fails_loudly_at_import():
    # a fresh interpreter whose stage list gained an eleventh stage: the checks table without it refuses to load
    module, table = "mltb_core.stages.rewards", "rewards.CHECKS"
    code = ("from mltb_core.stages import specs as stages\n"
            "stages.REWARD_STAGES += (stages.Stage(11, 'ensembling', 'models ensembled'),)\n"
            "stages.STAGE_NAMES += ('ensembling',)\n"
            f"import {module}\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "StageTableError" in done.stderr and f"{table} must have one entry per stage" in done.stderr
    assert "missing ['ensembling']" in done.stderr


def test_every_stage_spec_has_its_check_tools_and_prefix():
    from mltb_core.stages.masking import subtask_tools
    from mltb_core.stages.rewards import CHECKS
    from mltb_core.toolkit import tools  # noqa: F401  (registers the toolset)

    for s in REWARD_STAGES:
        assert stages.stage(s.name) is s and s.check is CHECKS[s.name] and s.prefix
        assert set(s.tools.first) <= set(subtask_tools(s.name))
    with pytest.raises(KeyError, match="unknown stage 'modelling'"):
        stages.stage("modelling")


def _record(**fields):
    base = dict(task="spaceship-titanic", planner="react", model="sim", trial=0, seed=0, config_hash="h",
                outcome="planner_failure", stage_reached=3, stage_name="combine_train_test")
    return TrialRecord(**{**base, **fields})


def test_front_ends_print_the_count_of_the_stage_list(monkeypatch):
    from mltb_core.cli import _record_lines
    from pytest_mltb.running import failure_message

    assert stage_label(3) == "3/10 (combine_train_test)" and stage_label(0) == "0/10"
    assert stage_label(10) == "10/10 (create_submission)"
    monkeypatch.setattr(stages, "STAGE_COUNT", 12)   # a longer list shows in every front end
    assert "reached stage 3/12 (combine_train_test); stopped" in failure_message(_record())
    assert "stage reached: 3/12 (combine_train_test); stopped" in "\n".join(_record_lines(_record()))
    assert "stage reached: 0/12; stopped" in "\n".join(_record_lines(_record(stage_reached=0, stage_name="")))
    # the stage's name is mltb's, never the record's (a records file's or a worker's text)
    shown = failure_message(_record(stage_name="\x1b[2J# forged", stop_reason="budget\x1b[2J",
                                    feedback="fix \x1b]0;pwned\x07", error="E\nValueError: \x9b2J"))
    assert "reached stage 3/12 (combine_train_test); stopped: budget [2J" in shown
    assert not any(c in shown for c in "\x1b\x07\x9b")     # no terminal sequence from the worker's text


def test_the_progress_line_prints_the_count_of_the_stage_list(monkeypatch):
    from types import SimpleNamespace

    from mltb_core.analysis.records import record_json
    from pytest_mltb.progress import ProgressReporter
    from pytest_mltb.transport import RECORD_PROPERTY

    lines = []
    terminal = SimpleNamespace(isatty=False, write_line=lines.append, ensure_newline=lambda: None)
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: terminal),
                             getoption=lambda name, default=None: 1)
    monkeypatch.setattr(stages, "STAGE_COUNT", 12)
    ProgressReporter(config, interval=0.0).pytest_runtest_logreport(
        SimpleNamespace(when="teardown", user_properties=[(RECORD_PROPERTY, record_json(_record()))]))
    assert "stage 3/12 (combine_train_test)" in lines[0]
