"""The synthetic policy: labelled, deterministic, sees only the context, errs by skill and reads feedback."""
import json
from pathlib import Path

import pytest

import mltb_core.tools  # noqa: F401
from mltb_core import prompts
from mltb_core.llm import make_backend
from mltb_core.llm.sim import SimPolicy, parse_task_prompt
from mltb_core.tasks import get_task

TOOLS = [t.schema() for t in mltb_core.tools.REGISTRY]


def _messages(task_slug="spaceship-titanic", history=()):
    task = get_task(task_slug)
    msgs = [{"role": "system", "content": prompts.EXPANSION_SYSTEM},
            {"role": "user", "content": task.prompt(Path("/data/x"), Path("/sandbox/y/submission.csv"))}]
    for i, (text, call, observation) in enumerate(history):
        msgs.append({"role": "assistant", "content": text, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": call["tool_name"],
                                                             "arguments": json.dumps(call["tool_args"])}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": observation})
    return msgs


def test_is_labelled_synthetic_and_built_from_the_model_string():
    sim = make_backend("sim:0.4", seed=3)
    assert isinstance(sim, SimPolicy) and sim.synthetic and sim.name == "sim:0.4" and sim.skill == 0.4


def test_reads_the_task_prompt_like_a_model_would():
    info = parse_task_prompt(get_task("playground-series-s4e1").prompt(Path("/d"), Path("/s/submission.csv")))
    assert (info.train_path, info.test_path, info.output_path) == ("/d/train.csv", "/d/test.csv", "/s/submission.csv")
    assert info.target == "Exited" and info.id_column == "id" and info.probability and not info.regression
    reg = parse_task_prompt(get_task("playground-series-s3e1").prompt(Path("/d"), Path("/s/submission.csv")))
    assert reg.regression and reg.target == "MedHouseVal"


def test_same_context_same_candidates_and_seeds_differ():
    msgs = _messages()
    a = SimPolicy(0.3, seed=1).complete(msgs, TOOLS, n=6)
    b = SimPolicy(0.3, seed=1).complete(msgs, TOOLS, n=6)
    c = SimPolicy(0.3, seed=2).complete(msgs, TOOLS, n=6)
    key = lambda r: [[t.key() for t in cand.tool_calls] for cand in r.candidates]  # noqa: E731
    assert key(a) == key(b) and key(a) != key(c)
    assert a.usage.calls == 1 and a.usage.prompt_tokens > 1000 and a.usage.cost_usd == 0


def test_skill_sets_the_mistake_rate():
    msgs = _messages()
    perfect = SimPolicy(1.0, seed=0).complete(msgs, TOOLS, n=20)
    assert {c.tool_calls[0].key() for c in perfect.candidates} == {perfect.candidates[0].tool_calls[0].key()}
    assert perfect.candidates[0].tool_calls[0].func_kwargs["filepath"] == "/data/x/train.csv"
    sloppy = SimPolicy(0.0, seed=0).complete(msgs, TOOLS, n=20)
    assert len({c.tool_calls[0].key() for c in sloppy.candidates if c.tool_calls}) > 1


def test_reads_stage_feedback_and_goes_back_to_clean():
    fill = {"tool_name": "fillna_with_median", "tool_args": {"bindings": {"df": "combined"}, "output": "combined"}}
    history = [("Thought: (notes: done=load_train,load_test,inspect,combine,fill_numeric,fill_rest; doing=fill_rest)",
                fill, "Applied fillna_with_median.\n\nStage check: Data cleaning incomplete: 5 missing values remain "
                      "in 1 column(s): Cabin (5).")]
    response = SimPolicy(1.0, seed=0).complete(_messages(history=history), TOOLS, n=5)
    names = {c.tool_calls[0].tool_name for c in response.candidates}
    assert names == {"fillna_with_mode"}


def test_masked_tools_are_never_proposed():
    allowed = [t for t in TOOLS if t["function"]["name"] in ("read_data", "get_dataframe_summary")]
    response = SimPolicy(0.0, seed=5).complete(_messages(), allowed, n=30)
    used = {c.tool_calls[0].tool_name for c in response.candidates if c.tool_calls}
    assert used <= {"read_data", "get_dataframe_summary"}


def test_plays_a_noisy_judge_for_lats():
    msgs = [{"role": "system", "content": prompts.LATS_EVALUATOR_SYSTEM}] + _messages()[1:] + [
        {"role": "user", "content": prompts.EVALUATOR_REQUEST}]
    text = SimPolicy(0.5, seed=0).complete(msgs, [], n=1).candidates[0].text
    assert "Score:" in text
