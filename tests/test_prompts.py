"""Prompt layout: one shared prefix for every planner and trial; the trimmed context; the config switch."""
import json
import time

import pytest

import mltb_core.toolkit.tools  # noqa: F401  (registers the tools)
from mltb_core.bench.splits import prepare_split
from mltb_core.bench.tasks import get_task
from mltb_core.config import TrialConfig
from mltb_core.llm import prompts
from mltb_core.llm.base import Candidate
from mltb_core.llm.sim import SimPolicy
from mltb_core.planners import PLANNERS
from mltb_core.planners.episode import Episode
from mltb_core.stages.rewards import StageContext
from mltb_core.runner.solve import prepare_agent_data
from mltb_core.toolkit.registry import ToolCall, ToolContext

TASK = "spaceship-titanic"


class Recording(SimPolicy):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests = []

    def _generate(self, messages, tools, n, temperature, seed):
        self.requests.append((messages, tools))
        return super()._generate(messages, tools, n, temperature, seed)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    task = get_task(TASK)
    split = prepare_split(task, seed=0)
    out = tmp_path_factory.mktemp("prompts")
    return task, split, out, prepare_agent_data(split, out)


def _episode(workspace, planner="react", trial=0, context="full", llm=None, **config):
    task, split, out, data_dir = workspace
    sandbox = out / "sandboxes" / f"{planner}-{context}-t{trial}"   # each trial its own sandbox, as in a run
    sandbox.mkdir(parents=True, exist_ok=True)
    config = TrialConfig(planner=planner, model="sim:0.7", trial=trial, context=context, **config)
    llm = llm or Recording(0.7, seed=config.trial_seed)
    return Episode.in_process(task, config, llm, StageContext.from_files(task, split.train_path, split.test_path, config.max_features),
                   ToolContext(sandbox=sandbox, data_dir=data_dir, task=task)), config


def _first_request(workspace, planner, trial):
    ep, config = _episode(workspace, planner, trial, max_llm_calls=1)
    PLANNERS[planner](ep, config).run()
    return ep.llm.requests[0]


def test_first_requests_of_all_planners_and_trials_share_the_task_and_tool_catalogue(workspace):
    planners = ["react", "mcts_shaped", "lats", "hierarchical_mcts"]
    requests = {(p, t): _first_request(workspace, p, t) for p in planners for t in (0, 3)}
    texts = {key: prompts.render_chat(messages) for key, (messages, _) in requests.items()}
    shared = prompts.shared_prefix_length(list(texts.values()))
    reference = texts[("react", 0)]
    catalogue_end = reference.index(prompts.PREAMBLE_END) + len(prompts.PREAMBLE_END)
    task_prompt = requests[("react", 0)][0][0]["content"]
    assert reference.index(prompts.task_section(task_prompt)) < catalogue_end
    assert shared >= catalogue_end, {key: prompts.shared_prefix_length([reference, t]) for key, t in texts.items()}
    # the first message is byte-identical whatever the planner and trial, and holds the whole catalogue
    firsts = {json.dumps(messages[0]) for messages, _ in requests.values()}
    assert len(firsts) == 1
    for name in ("read_data", "fit_lightgbm_classifier", "save_dataframe_to_csv"):
        assert f"\n- {name}: " in task_prompt
    # measured: the prefix is long enough for OpenAI's prompt caching (>= 1,024 tokens at ~4 chars a token)
    assert shared // 4 >= 1024
    # the planner's own instructions come after the shared part
    assert requests[("hierarchical_mcts", 0)][0][1]["content"] == prompts.subtask_system("train_data_loading")
    assert requests[("react", 0)][0][1]["content"] == prompts.REACT_SYSTEM


def test_the_preamble_holds_no_trial_specific_path(workspace):
    ep, _ = _episode(workspace, "react", trial=5)
    assert str(ep.workspace.tool_ctx.sandbox) not in ep.preamble
    assert str(ep.workspace.tool_ctx.data_dir) not in ep.preamble
    assert f"to {prompts.TASK_HEADER}" not in ep.preamble and "in CSV format to submission.csv" in ep.preamble
    # a run gives every case its own copy of the data (<run>/work/<case>/data/...): same preamble for all
    task, split, out, _ = workspace
    other = (task, split, out, prepare_agent_data(split, out / "work" / "another-case"))
    assert _episode(other, "mcts_shaped", trial=2)[0].preamble == ep.preamble
    assert "located at train.csv" in ep.preamble and "located at test.csv" in ep.preamble


def _walk(ep, steps):
    node = ep.root
    for call in steps:
        node = ep.step(node, Candidate("Thought: next.", [call]))
        assert node.ok, node.observation[:300]
    return node


def _steps(data_dir):
    return [ToolCall("read_data", {}, {"filepath": str(data_dir / "train.csv")}, "train"),
            ToolCall("read_data", {}, {"filepath": str(data_dir / "test.csv")}, "test"),
            ToolCall("get_dataframe_summary", {"df": "train"}, {}),
            ToolCall("concatenate_train_test", {"train_df": "train", "test_df": "test"}, {}, "combined"),
            ToolCall("fillna_with_median", {"df": "combined"}, {}, "combined"),
            ToolCall("get_missing_summary", {"df": "combined"}, {})]


def test_trimmed_context_cuts_older_results_keeps_the_last_few_and_the_prefix(workspace):
    data_dir = workspace[3]
    full_ep, _ = _episode(workspace, "react", context="full")
    trim_ep, _ = _episode(workspace, "react", context="trimmed")
    full = full_ep.messages(_walk(full_ep, _steps(data_dir)), prompts.REACT_SYSTEM)
    trimmed = trim_ep.messages(_walk(trim_ep, _steps(data_dir)), prompts.REACT_SYSTEM)
    assert full[:2] == trimmed[:2]                                   # the stable prefix is untouched
    assert len(full) == len(trimmed)
    full_obs = [m["content"] for m in full if m["role"] == "tool"]
    trim_obs = [m["content"] for m in trimmed if m["role"] == "tool"]
    older = len(full_obs) - prompts.TRIMMED_FULL_OBSERVATIONS
    for f, t in zip(full_obs[:older], trim_obs[:older]):
        assert t == prompts.trim_observation(f)
        assert t.splitlines()[0] == f.splitlines()[0][:prompts.TRIMMED_LINE_CHARS] or f.splitlines()[0].startswith(
            t.splitlines()[0][:-3])
        assert len(t.splitlines()) <= prompts.TRIMMED_FIRST_LINES + 1
    # the get_dataframe_summary result (step 3) is long and older than the window: cut, and says so
    assert len(full_obs[2]) > 3 * len(trim_obs[2]) and "more lines cut" in trim_obs[2]
    # the last few stay whole, except that the last lists every scratchpad object with its columns
    assert trim_obs[older:-1] == full_obs[older:-1]
    last = trim_obs[-1]

    def without_listing(text):
        return [p for p in text.split("\n\n") if not p.startswith(prompts.SCRATCHPAD_HEADER)]

    assert without_listing(last) == without_listing(full_obs[-1])   # the tool's message and stage checks kept
    listing = last.split(prompts.SCRATCHPAD_HEADER, 1)[1]
    for name in ("train", "test", "combined"):
        line = next(line for line in listing.splitlines() if line.startswith(f"- {name}:"))
        assert "columns=[" in line, line
    # fewer characters in all
    assert sum(map(len, trim_obs)) < sum(map(len, full_obs))


def test_trimmed_context_sends_tool_descriptions_cut_to_their_first_paragraph(workspace):
    full_ep, _ = _episode(workspace, "react", context="full")
    trim_ep, _ = _episode(workspace, "react", context="trimmed")
    full, trimmed = full_ep.tool_schemas(), trim_ep.tool_schemas()
    assert [s["function"]["name"] for s in full] == [s["function"]["name"] for s in trimmed]
    assert all(t["function"]["parameters"] == f["function"]["parameters"] for f, t in zip(full, trimmed))
    assert all(f["function"]["description"].startswith(t["function"]["description"])
               and "\n\n" not in t["function"]["description"] for f, t in zip(full, trimmed))
    assert len(json.dumps(trimmed)) < 0.8 * len(json.dumps(full))
    assert full_ep.preamble == trim_ep.preamble


def test_the_sim_reads_a_trimmed_context_and_still_follows_its_pipeline(workspace):
    """The synthetic policy is shown the trimmed history: its next proposals are well-formed calls on
    objects that exist (it reads the listing of the last result)."""
    data_dir = workspace[3]
    ep, _ = _episode(workspace, "mcts_shaped", context="trimmed")
    node = _walk(ep, _steps(data_dir))
    before = time.perf_counter()
    response = SimPolicy(1.0, seed=2).complete(ep.messages(node, prompts.EXPANSION_SYSTEM), ep.tool_schemas(), n=3)
    assert 0 <= response.usage.seconds <= time.perf_counter() - before   # the call's own time, not a clock value
    for candidate in response.candidates:
        [call] = candidate.tool_calls
        assert set(call.bindings.values()) <= set(ep.workspace._states[node.state].pad.names()), call


def test_context_is_checked_and_changes_the_config_hash():
    base = TrialConfig(planner="react", model="sim")
    assert base.context == "full"
    assert base.with_(context="trimmed").config_hash() != base.config_hash()
    with pytest.raises(ValueError, match=r"context: 'short' is not allowed: expected one of full, trimmed"):
        base.with_(context="short")


def test_all_prompts_expose_the_layout_and_the_trimming_rule():
    everything = prompts.all_prompts()
    assert prompts.TASK_HEADER in everything["shared_preamble"] and prompts.TOOLS_HEADER in everything["shared_preamble"]
    assert everything["message_order"][0].startswith("system: shared_preamble")
    assert everything["trimmed_context"]["full_observations"] == prompts.TRIMMED_FULL_OBSERVATIONS
    json.dumps(everything)   # written next to a run's results


def test_context_option_reaches_the_trial_config_and_bad_values_are_named():
    from pytest_mltb.collection import trial_config
    from pytest_mltb.options import Settings, pytest_options

    option = next(opt for opt in pytest_options() if opt.name == "context")
    assert option.env == "MLTB_CONTEXT" and option.parse("trimmed", "--context") == "trimmed"
    with pytest.raises(ValueError, match="--context: 'half' is not allowed: expected one of full, trimmed"):
        option.parse("half", "--context")
    defaults = {opt.name: opt.default for opt in pytest_options()}
    assert trial_config(Settings(defaults), "react", "sim", 0).context == "full"
    assert trial_config(Settings({**defaults, "context": "trimmed"}), "react", "sim", 0).context == "trimmed"
