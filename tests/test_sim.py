"""The synthetic policy: labelled, deterministic, sees only the context, errs by skill and reads feedback."""
import json
from pathlib import Path

import pytest

import mltb_core.toolkit.tools  # noqa: F401
from mltb_core.llm import prompts
from mltb_core.llm import make_backend
from mltb_core.llm import sim as sim_module
from mltb_core.llm.sim import JUDGE_NOISE_SD, PIPELINE, SimPolicy, parse_task_prompt
from mltb_core.bench.tasks import get_task

TOOLS = [t.schema() for t in mltb_core.toolkit.tools.REGISTRY]


def _messages(task_slug="spaceship-titanic", history=(), system=prompts.EXPANSION_SYSTEM):
    """A request as the episode lays it out: shared preamble, the planner's instructions, the path."""
    task = get_task(task_slug)
    preamble = prompts.shared_preamble(task.prompt(Path("submission.csv")), TOOLS)
    msgs = [{"role": "system", "content": preamble}, {"role": "system", "content": system}]
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
    info = parse_task_prompt(get_task("playground-series-s4e1").prompt(Path("submission.csv")))
    assert (info.train_path, info.test_path, info.output_path) == ("train.csv", "test.csv", "submission.csv")
    assert info.target == "Exited" and info.id_column == "id" and info.probability and not info.regression
    reg = parse_task_prompt(get_task("playground-series-s3e1").prompt(Path("submission.csv")))
    assert reg.regression and reg.target == "MedHouseVal" and not reg.logarithmic
    assert parse_task_prompt(get_task("nyc-taxi-trip-duration").prompt(Path("submission.csv"))).logarithmic


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
    assert perfect.candidates[0].tool_calls[0].func_kwargs["filepath"] == "train.csv"
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
    msgs = _messages(system=prompts.LATS_EVALUATOR_SYSTEM) + [
        {"role": "user", "content": prompts.EVALUATOR_REQUEST}]
    text = SimPolicy(0.5, seed=0).complete(msgs, [], n=1).candidates[0].text
    assert "Score:" in text


# ------------------------------------------------------------------ planner-agnostic
_READ = {"tool_name": "read_data", "tool_args": {"bindings": {}, "func_kwargs": {"filepath": "/data/x/train.csv"},
                                                 "output": "train"}}
_BAD = {"tool_name": "fillna_with_median", "tool_args": {"bindings": {"df": "nothing"}, "output": "nothing"}}


def _judged_score(history, seed, system=prompts.LATS_EVALUATOR_SYSTEM):
    msgs = _messages(history=history, system=system) + [
        {"role": "user", "content": prompts.EVALUATOR_REQUEST}]
    text = SimPolicy(0.5, seed=seed).complete(msgs, [], n=1).candidates[0].text
    return int(text.rsplit("Score:", 1)[1])


def test_judge_noise_has_a_fixed_scale_whatever_the_trajectory_length():
    """Same progress, 3 steps or 23 steps (20 failed calls): the score's spread is the same."""
    read_test = {"tool_name": "read_data", "tool_args": {"bindings": {}, "output": "test",
                                                         "func_kwargs": {"filepath": "/data/x/test.csv"}}}
    combine = {"tool_name": "concatenate_train_test", "tool_args": {"bindings": {"train_df": "train", "test_df": "test"},
                                                                    "output": "combined"}}
    short = [("Thought: load", _READ, "Applied read_data."), ("Thought: load", read_test, "Applied read_data."),
             ("Thought: combine (notes: done=load_train,load_test,combine; doing=combine)", combine,
              "Applied concatenate_train_test.")]
    failed = [("Thought: fill (notes: done=load_train; doing=fill_numeric)", _BAD, "Error: no object 'nothing'.")]
    long = short + failed * 20
    spreads = {}
    for name, history in (("short", short), ("long", long)):
        scores = [_judged_score(history, seed) for seed in range(150)]
        mean = sum(scores) / len(scores)
        spreads[name] = (sum((x - mean) ** 2 for x in scores) / len(scores)) ** 0.5
        assert abs(mean - (1 + 9 * 3 / len(PIPELINE))) < 0.3, (name, mean)   # three steps shown
    assert abs(spreads["long"] - spreads["short"]) < 0.25, spreads
    assert 0.8 < spreads["short"] < 1.3   # about JUDGE_NOISE_SD after rounding
    assert JUDGE_NOISE_SD == 1.0


def test_judge_scores_what_the_trajectory_shows_not_who_asks():
    history = [("Thought: load (notes: done=load_train; doing=load_train)", _READ, "Applied read_data.")]
    for seed in range(5):
        assert _judged_score(history, seed) == _judged_score(
            history, seed, system="Grade this agent's work. End with 'Score: N' (1-10).")


@pytest.fixture(scope="module")
def node_at_cleaning(tmp_path_factory):
    """An episode on Spaceship Titanic and a node five calls deep (data loaded and combined, one fill)."""
    from mltb_core.config import TrialConfig
    from mltb_core.llm.base import Candidate
    from mltb_core.planners.episode import Episode
    from mltb_core.toolkit.registry import ToolCall, ToolContext
    from mltb_core.stages.rewards import StageContext
    from mltb_core.bench.splits import prepare_split
    from mltb_core.runner.solve import prepare_agent_data

    task = get_task("spaceship-titanic")
    split = prepare_split(task, seed=0)
    out = tmp_path_factory.mktemp("agnostic")
    data_dir = prepare_agent_data(split, out)
    (out / "sandbox").mkdir()
    config = TrialConfig(planner="mcts_shaped", model="sim:0.5", tool_masking=False)
    ep = Episode.in_process(task, config, SimPolicy(0.5, seed=7), StageContext.from_files(task, split.train_path, split.test_path, 1000),
                 ToolContext(sandbox=out / "sandbox", data_dir=data_dir, task=task))
    steps = [("load_train", ToolCall("read_data", {}, {"filepath": str(data_dir / "train.csv")}, "train")),
             ("load_test", ToolCall("read_data", {}, {"filepath": str(data_dir / "test.csv")}, "test")),
             ("inspect", ToolCall("get_dataframe_summary", {"df": "train"}, {})),
             ("combine", ToolCall("concatenate_train_test", {"train_df": "train", "test_df": "test"}, {}, "combined")),
             ("fill_numeric", ToolCall("fillna_with_median", {"df": "combined"}, {}, "combined"))]
    node, done = ep.root, []
    for step, call in steps:
        done.append(step)
        node = ep.step(node, Candidate(f"Thought: next. (notes: done={','.join(done)}; doing={step})", [call]))
        assert node.ok, node.observation[:300]
    return ep, config, node


def _proposals(ep, node, system, tools, extra=()):
    msgs = ep.messages(node, system, extra)
    response = SimPolicy(0.5, seed=11).complete(msgs, tools, n=3)
    return [[t.key() for t in c.tool_calls] for c in response.candidates]


def test_same_state_same_proposals_whichever_planner_asks(node_at_cleaning):
    """Each planner's own propose prompt at the same node (tools unmasked): identical candidates."""
    from mltb_core.planners import PLANNERS
    from mltb_core.stages.rewards import REWARD_STAGES

    ep, config, node = node_at_cleaning
    tools = ep.tool_schemas()
    answers = {"react": _proposals(ep, node, prompts.REACT_SYSTEM, tools)}
    for name, cls in PLANNERS.items():
        if name == "react" or not hasattr(cls, "system_for"):   # whole-solution/staged planners: their prompts below
            continue
        planner = cls(ep, config.with_(planner=name))
        planner._stage = REWARD_STAGES[node.progress.stage]          # hierarchical: the subtask this node is in
        planner._seed_depth = 0
        assert planner.allowed_for(node) is None               # masking off: the same tools for everyone
        answers[name] = _proposals(ep, node, planner.system_for(node), tools, planner.extra_messages(node))
    for system in (prompts.AUTOMIND_DRAFT_SYSTEM, prompts.AUTOMIND_IMPROVE_SYSTEM, prompts.AUTOMIND_DEBUG_SYSTEM,
                   prompts.MLE_STAR_REFINE_SYSTEM, prompts.AGENT_K_STAGE_SYSTEM):
        answers[system[:60]] = _proposals(ep, node, system, tools)
    assert len({str(a) for a in answers.values()}) == 1, answers
    # and the prompts really differ: hierarchical asks with its subtask prompt
    assert prompts.subtask_system(REWARD_STAGES[node.progress.stage].name) != prompts.EXPANSION_SYSTEM


def test_masking_changes_the_answer_only_through_the_tools_it_removes(node_at_cleaning):
    """Hierarchical masking offers fewer tools: that information (not the planner's identity) changes the
    answer; the same masked tool list under another planner's prompt gives the same answer."""
    from mltb_core.stages.masking import subtask_tools
    from mltb_core.stages.rewards import REWARD_STAGES

    ep, config, node = node_at_cleaning
    allowed = subtask_tools(REWARD_STAGES[node.progress.stage].name, ep.registry)
    masked = ep.tool_schemas(allowed)
    hierarchical = _proposals(ep, node, prompts.subtask_system(REWARD_STAGES[node.progress.stage].name), masked)
    shaped = _proposals(ep, node, prompts.EXPANSION_SYSTEM, masked)
    assert hierarchical == shaped
    assert all(json.loads(k)["tool_name"] in allowed for cand in hierarchical for k in cand)


def test_the_sim_never_reads_which_planner_asks():
    """No branch of the policy keys on a planner's prompt text (the subtask prefixes, the LATS judge prompt)."""
    source = Path(sim_module.__file__).read_text()
    for marker in ("SUBTASK_PREFIXES", "LATS_EVALUATOR_SYSTEM", "LATS_REFLECTION_SYSTEM", "EXPANSION_SYSTEM",
                   "REACT_SYSTEM", "subtask_system"):
        assert marker not in source, marker


def test_writes_the_submission_with_the_paper_tools_when_create_submission_is_not_offered():
    """At the end of the pipeline: ids from the test frame, named predictions, joined, saved to the output path."""
    notes = "load_train,load_test,inspect,combine,fill_numeric,fill_rest,drop_ids,datetime,encode,split,xy_train,x_test,fit,predict"
    predict = {"tool_name": "predict_target", "tool_args": {"bindings": {"model": "model", "X_data": "X_test"},
                                                            "output": "predictions"}}
    history = [("Thought: read", _READ | {"tool_args": {"bindings": {}, "func_kwargs": {"filepath": "/data/x/test.csv"},
                                                        "output": "test"}}, "Applied read_data."),
               (f"Thought: predict (notes: done={notes}; doing=predict)", predict, "Applied predict_target.")]
    paper = [t for t in TOOLS if t["function"]["name"] != "create_submission"]
    call = SimPolicy(1.0, seed=0).complete(_messages(history=history), paper, n=1).candidates[0].tool_calls[0]
    assert call.tool_name == "get_features" and call.bindings == {"df": "test"}
    assert call.func_kwargs == {"columns": ["PassengerId"]}
    extended = SimPolicy(1.0, seed=0).complete(_messages(history=history), TOOLS, n=1).candidates[0].tool_calls[0]
    assert extended.tool_name == "create_submission"


# ------------------------------------------------------------------ the neutral setting (assumption 8)
def test_neutral_is_a_model_string_setting_and_says_so():
    from mltb_core.llm.backends import parse_model

    neutral = make_backend("sim:0.5:neutral", seed=3)
    assert isinstance(neutral, SimPolicy) and neutral.neutral and neutral.name == "sim:0.5:neutral"
    assert not make_backend("sim:0.5", seed=3).neutral
    assert parse_model("sim:neutral").value.skill == 0.7 and parse_model("sim:0.5:neutral").id == "sim0.5-neutral"
    with pytest.raises(ValueError, match="'fair' is not known"):
        parse_model("sim:0.5:fair")
    from mltb_core.analysis.tables import policy_assumptions
    assert "never heeded" in policy_assumptions("sim:0.5:neutral") and "0.775" in policy_assumptions("sim:0.5:neutral")


def test_neutral_ignores_stage_checks_but_not_tool_errors():
    fill = {"tool_name": "fillna_with_median", "tool_args": {"bindings": {"df": "combined"}, "output": "combined"}}
    history = [("Thought: (notes: done=load_train,load_test,inspect,combine,fill_numeric,fill_rest; doing=fill_rest)",
                fill, "Applied fillna_with_median.\n\nStage check: Data cleaning incomplete: 5 missing values remain "
                      "in 1 column(s): Cabin (5).")]
    response = SimPolicy(1.0, seed=0, neutral=True).complete(_messages(history=history), TOOLS, n=5)
    assert "fillna_with_mode" not in {c.tool_calls[0].tool_name for c in response.candidates}   # moves on instead
    nan_error = [("Thought: (notes: done=load_train,load_test,inspect,combine,fill_numeric,fill_rest,drop_ids,"
                  "datetime,encode,split,xy_train,x_test; doing=fit)",
                  {"tool_name": "fit_lightgbm", "tool_args": {"bindings": {"X": "X_train", "y": "y_train"},
                                                              "output": "model"}},
                  "Error: Input X contains NaN.")]
    default = SimPolicy(1.0, seed=0).complete(_messages(history=nan_error), TOOLS, n=5)
    neutral = SimPolicy(1.0, seed=0, neutral=True).complete(_messages(history=nan_error), TOOLS, n=5)
    key = lambda r: [[t.key() for t in c.tool_calls] for c in r.candidates]  # noqa: E731
    assert key(default) == key(neutral)     # a tool error is every planner's input: read alike


def _first_step_mistakes(neutral, reflections):
    """Share of 400 first-step candidates (skill 0) that are not the correct read of train.csv."""
    msgs = _messages() + ([{"role": "user", "content": prompts.REFLECTIONS_HEADER + "\n- check each stage"}]
                          if reflections else [])
    out = SimPolicy(0.0, seed=0, neutral=neutral).complete(msgs, TOOLS, n=400).candidates
    right = [c for c in out if c.tool_calls and c.tool_calls[0].tool_name == "read_data"
             and c.tool_calls[0].func_kwargs.get("filepath") == "train.csv" and c.tool_calls[0].output == "train"]
    return 1 - len(right) / len(out)


def test_neutral_reflections_change_no_rate():
    # default: 0.6 without reflections, 0.45 with them; neutral: 0.6 both ways (standard error about 0.025)
    assert _first_step_mistakes(False, True) < _first_step_mistakes(False, False) - 0.08
    assert abs(_first_step_mistakes(True, True) - _first_step_mistakes(True, False)) < 0.08


def _neutral_judge(history, seed):
    msgs = _messages(history=history, system=prompts.LATS_EVALUATOR_SYSTEM) + [
        {"role": "user", "content": prompts.EVALUATOR_REQUEST}]
    return SimPolicy(0.5, seed=seed, neutral=True).complete(msgs, [], n=1).candidates[0].text


def test_the_neutral_judge_scores_the_midpoint_whatever_the_trajectory_shows():
    shown = [("Thought: load (notes: done=load_train; doing=load_train)", _READ, "Applied read_data.")]
    for history in ((), shown * 6):
        texts = [_neutral_judge(history, seed) for seed in range(150)]
        assert all("pipeline steps" not in t for t in texts)
        mean = sum(int(t.rsplit("Score:", 1)[1]) for t in texts) / len(texts)
        assert abs(mean - (1 + 9 * sim_module.NEUTRAL_JUDGE_PROGRESS)) < 0.3, mean
