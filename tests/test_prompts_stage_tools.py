"""The parameters of the next stage's tools in every proposal request: within the budget, from the tools'
schemas, the same for every planner, and placed after the step where they changed so that each request along a
path extends the previous one (a prefix cache evaluates only the new turn).
Also: a request that outgrows the context window is retried with older results trimmed, and LATS reflects at
a depth its call budget reaches."""
import dataclasses
import json
from pathlib import Path

import pytest

import mltb_core.toolkit.tools  # noqa: F401  (registers the tools)
from mltb_core.bench.splits import prepare_split
from mltb_core.bench.tasks import get_task
from mltb_core.config import TrialConfig
from mltb_core.llm import prompts
from mltb_core.llm.base import Candidate, ContextOverflowError
from mltb_core.llm.local import chatml_messages
from mltb_core.llm.sim import SimPolicy
from mltb_core.planners import PLANNERS
from mltb_core.planners.episode import Episode
from mltb_core.planners.lats import reflection_depth
from mltb_core.stages.masking import stage_tools, subtask_tools
from mltb_core.stages.rewards import REWARD_STAGES, StageContext
from mltb_core.planners.trajectory import TrajectoryWriter, read_trajectory
from mltb_core.planners.tree import Node, path_to
from mltb_core.runner.expert import load_expert
from mltb_core.runner.solve import prepare_agent_data
from mltb_core.toolkit.registry import ToolContext

TASK = "spaceship-titanic"

# What each stage cannot be done without: a tool and the parameters a call to it needs.
NEEDED = {
    "train_data_loading": {"read_data": ["func_kwargs.filepath (required)", "output"]},
    "test_data_loading": {"read_data": ["func_kwargs.filepath (required)", "output"]},
    "combine_train_test": {"concatenate_train_test": ["bindings.train_df", "bindings.test_df", "output"]},
    "data_cleaning": {"fillna_with_median": ["bindings.df", "func_kwargs.columns (default null)"],
                      "fillna_with_mode": ["bindings.df"]},
    "feature_engineering": {"cast_categorical_columns": ["bindings.df"], "label_encode": ["bindings.df"]},
    "split_train_test": {"split_combined_into_train_test": ["bindings.combined", "output"]},
    "train_data_to_features_target": {"convert_dataframe_to_features_target": [
        "bindings.df", "func_kwargs.target_column (required)", "func_kwargs.is_train (default true)"]},
    "test_data_to_features": {"convert_dataframe_to_features_target": ["func_kwargs.is_train (default true)"]},
    "modeling": {"fit_lightgbm_classifier": ["bindings.X_train", "bindings.y_train"],
                 "tune_xgboost_regressor": ["bindings.X_train"]},
    "create_submission": {"predict_target": ["bindings.model", "bindings.X_data"],
                          "save_dataframe_to_csv": ["bindings.df", "func_kwargs.filepath (required)"]},
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    task = get_task(TASK)
    split = prepare_split(task, seed=0)
    out = tmp_path_factory.mktemp("stage-tools")
    return task, split, out, prepare_agent_data(split, out)


class Recording(SimPolicy):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests = []

    def _generate(self, messages, tools, n, temperature, seed):
        self.requests.append(messages)
        return super()._generate(messages, tools, n, temperature, seed)


def _episode(workspace, planner="react", llm=None, trajectory=None, **config):
    task, split, out, data_dir = workspace
    sandbox = out / "sandboxes" / f"{planner}-{len(list((out / 'sandboxes').glob('*'))) if (out / 'sandboxes').exists() else 0}"
    sandbox.mkdir(parents=True, exist_ok=True)
    config = TrialConfig(planner=planner, model="sim:0.7", **config)
    llm = llm or Recording(0.7, seed=config.trial_seed)
    return Episode.in_process(task, config, llm, StageContext.from_files(task, split.train_path, split.test_path, config.max_features),
                              ToolContext(sandbox=sandbox, data_dir=data_dir, task=task), trajectory), config


def _at_stage(stage: int) -> Node:
    node = Node()
    node.progress = dataclasses.replace(node.progress, stage=stage)
    return node


def _block(note: str, tool: str) -> list[str]:
    """The lines of the block that lists ``tool`` (its header names it among tools sharing the parameters)."""
    blocks = note.split("\n- ")
    block = next(b for b in blocks[1:] if tool in b.split("\n", 1)[0].split(", "))
    return [line.strip() for line in block.splitlines()[1:]]


def _listed(note: str) -> set[str]:
    """Every tool the note names: block headers (``- a, b``) and the names-only line."""
    names = set()
    for line in note.splitlines():
        if line.startswith("- "):
            names |= set(line[2:].split(", "))
        elif line.startswith(prompts.STAGE_TOOLS_MORE):
            names |= set(line.removeprefix(prompts.STAGE_TOOLS_MORE).rstrip(".").split(", "))
    return names


@pytest.mark.parametrize("predicted", [False, True])
@pytest.mark.parametrize("toolset", ["paper", "extended"])
def test_each_stage_shows_the_parameters_its_tools_need_within_the_budget(workspace, toolset, predicted):
    ep, _ = _episode(workspace, toolset=toolset)
    for stage in REWARD_STAGES:
        node = _at_stage(stage.number - 1)
        node.progress = dataclasses.replace(node.progress, predicted=predicted)
        note = ep.stage_tools_note(node)
        assert note.startswith(prompts.STAGE_TOOLS_HEADER) and len(note) <= prompts.STAGE_TOOLS_BUDGET, stage.name
        for tool, needed in NEEDED[stage.name].items():
            lines = _block(note, tool)
            for parameter in needed:
                assert any(line.startswith(parameter) for line in lines), (stage.name, tool, parameter, lines)
            # every parameter of the tool's schema is there, described as its schema describes it
            properties = ep.tool_schemas([tool])[0]["function"]["parameters"]["properties"]
            for part in ("bindings", "func_kwargs"):
                for name, spec in properties[part]["properties"].items():
                    line = next(line for line in lines if line.startswith(f"{part}.{name}"))
                    described = spec["description"].removeprefix("name of a scratchpad object: ")
                    assert described[:40] in line, (tool, name, line)
        # only the stage's tools, and every one of them at least by name
        assert _listed(note) == set(subtask_tools(stage.name, ep.registry)), stage.name
    assert ep.stage_tools_note(_at_stage(len(REWARD_STAGES))) == ""   # nothing left to do


def test_a_masked_request_shows_only_the_allowed_tools(workspace):
    ep, _ = _episode(workspace)
    note = ep.stage_tools_note(_at_stage(8), allowed=["fit_lightgbm_classifier", "predict_target"])
    assert "fit_lightgbm_classifier" in note and "fit_xgboost_classifier" not in note
    assert "predict_target" not in note   # not a tool of the modeling stage


def test_once_the_test_rows_are_predicted_the_note_shows_the_save_first(workspace):
    # a model shown predict_target first proposed it again below all 8 of its predictions (issue 33)
    ep, _ = _episode(workspace)
    node = _at_stage(9)
    before = ep.stage_tools_note(node)
    node.progress = dataclasses.replace(node.progress, predicted=True)
    after = ep.stage_tools_note(node)
    assert before.split("\n")[1] == "- predict_target" and after.split("\n")[1] == "- save_dataframe_to_csv"
    assert _listed(after) == _listed(before) and len(after) <= prompts.STAGE_TOOLS_BUDGET
    # an earlier stage's note does not change
    assert ep.stage_tools_note(_at_stage(8)) == ep.stage_tools_note(
        dataclasses.replace(_at_stage(8), progress=dataclasses.replace(_at_stage(8).progress, predicted=True)))


def test_the_budget_cuts_the_least_relevant_tools_to_names_and_holds_for_any_budget(workspace):
    ep, _ = _episode(workspace)
    schemas = [ep.tool_schemas([name])[0] for name in stage_tools("feature_engineering", ep.registry)]
    for budget in (300, 1_000, 2_500, prompts.STAGE_TOOLS_BUDGET):
        note = prompts.stage_tools_note(schemas, budget)
        assert len(note) <= budget
    note = prompts.stage_tools_note(schemas)
    shown, rest = note.split(prompts.STAGE_TOOLS_MORE)
    assert "cast_categorical_columns" in shown and "get_dataframe_summary" in rest   # summaries go last
    assert prompts.stage_tools_note([]) == ""


def _notes(request):
    return [m["content"] for m in request if prompts.is_stage_tools_note(m)]


def _kept(request, following) -> list:
    """What of ``request`` the ``following`` request must start with: all of it, less a closing note that the
    following request replaces (the stage changed again at the very next step: the following request shows
    another note after the new step, and not the dropped one)."""
    ends_with_note = prompts.is_stage_tools_note(request[-1])
    if ends_with_note and following[len(request) - 1:len(request)] != request[-1:]:
        dropped = request[-1]["content"]
        assert dropped not in _notes(following) and _notes(following)[-1] != dropped
        assert prompts.is_stage_tools_note(following[-1])   # the replacing note closes the following request
        return request[:-1]
    return request


def test_each_request_along_a_path_extends_the_previous_one(workspace):
    """Along a real path across stages: each proposal request is the previous one plus the new step (and the
    note, where the stage changed; a note the very next step replaces is dropped), in the messages and in the
    chat text the local model's server evaluates; the note shown last is the node's own, and a note is never
    repeated back to back."""
    ep, _ = _episode(workspace)
    tools = ep.tool_schemas()
    node, requests, stages, notes = ep.root, [], [], []
    for call in load_expert(TASK)[:8]:
        requests.append(ep.proposal_messages(node, prompts.REACT_SYSTEM))
        stages.append(node.progress.stage)
        notes.append(ep.stage_tools_note(node))
        assert _notes(requests[-1])[-1] == notes[-1]   # the node's own note is the last one shown
        node = ep.step(node, Candidate("", [call]))
    # the expert's first eight steps: train data loaded (stage 1), test data loaded (2), combined (3), then
    # cleaning steps in stage 3. Both loading stages show the same note (read_data first), so the root's note
    # stays; the combining note, shown after step 2, is replaced after step 3 by the cleaning note, which stays
    assert stages == [0, 1, 2, 3, 3, 3, 3, 3], stages
    assert notes[0] == notes[1] and len(set(notes)) == 3
    assert [_notes(r) for r in requests[:3]] == [[notes[0]], [notes[0]], [notes[0], notes[2]]]
    assert all(_notes(r) == [notes[0], notes[3]] for r in requests[3:])
    at = [i for i, m in enumerate(requests[-1]) if prompts.is_stage_tools_note(m)][-1]
    assert requests[-1][at - 1]["tool_call_id"] == "call_3"
    for request, following in zip(requests, requests[1:]):
        kept = _kept(request, following)
        assert following[:len(kept)] == kept and len(following) > len(kept)
        before, after = (prompts.render_chat(chatml_messages(r, tools)) for r in (kept, following))
        # the chat text too: the following request's text starts with the kept one's
        assert prompts.shared_prefix_length([before, after]) == len(before)
    # the note is the only stage-dependent part: the system messages are the same at every stage
    assert len({json.dumps(r[:2]) for r in requests}) == 1


def test_a_trimmed_request_keeps_only_the_current_stage_note(workspace):
    """Notes of earlier stages stay in the path's requests, but not in a trimmed one (its bound would not hold
    with a note per stage): there the current stage's note ends the request, once."""
    ep, _ = _episode(workspace, context="trimmed")
    node = ep.root
    for call in load_expert(TASK)[:8]:
        request = ep.proposal_messages(node, prompts.REACT_SYSTEM)
        note = ep.stage_tools_note(node)
        assert _notes(request) == ([note] if note else []) and (not note or request[-1]["content"] == note)
        node = ep.step(node, Candidate("", [call]))
    full, _ = _episode(workspace)
    node = full.root
    for call in load_expert(TASK)[:8]:
        full.proposal_messages(node, prompts.REACT_SYSTEM)
        node = full.step(node, Candidate("", [call]))
    assert len(_notes(full.proposal_messages(node, prompts.REACT_SYSTEM))) >= 2   # untrimmed: earlier ones too


def test_a_sibling_branch_keeps_the_parents_request_as_its_prefix(workspace):
    """MCTS grows several children of a node: the request from each child starts with the request from
    the node, and a later request from the node itself is unchanged by what was proposed below it."""
    ep, _ = _episode(workspace, "mcts_shaped")
    calls = load_expert(TASK)
    parent = ep.step(ep.root, Candidate("", [calls[0]]))
    first = ep.proposal_messages(parent, prompts.EXPANSION_SYSTEM)
    children = [ep.step(parent, Candidate("", [call])) for call in (calls[1], calls[0])]
    assert children[0].progress.stage != children[1].progress.stage   # the one that loaded the test data moved on
    for child in children:
        request = ep.proposal_messages(child, prompts.EXPANSION_SYSTEM)
        kept = _kept(first, request)
        assert request[:len(kept)] == kept and len(kept) >= len(first) - 1
        assert _notes(request)[-1] == ep.stage_tools_note(child)
    assert ep.proposal_messages(parent, prompts.EXPANSION_SYSTEM) == first


def test_a_request_with_other_tools_ends_with_its_own_note(workspace):
    """A second proposal from a node with other ``allowed`` tools: its note comes last; the note recorded
    by the first proposal stays what later requests below the node show."""
    ep, _ = _episode(workspace)
    first = ep.proposal_messages(ep.root, prompts.REACT_SYSTEM)
    narrow = ep.proposal_messages(ep.root, prompts.REACT_SYSTEM, allowed=["read_data"])
    assert narrow[:-1] == first and narrow[-1]["content"] == ep.stage_tools_note(ep.root, ["read_data"])
    assert narrow[-1] != first[-1]
    child = ep.step(ep.root, Candidate("", [load_expert(TASK)[0]]))
    assert ep.proposal_messages(child, prompts.REACT_SYSTEM)[:len(first)] == first


@pytest.mark.parametrize("planner", ["react", "lats", "mcts_shaped", "hierarchical_mcts", "automind", "agent_k"])
def test_every_planner_ends_its_first_request_with_the_same_note(workspace, planner):
    """At the root the path is empty, so the root's note is the first request's last message."""
    ep, config = _episode(workspace, planner, max_llm_calls=1)
    PLANNERS[planner](ep, config).run()
    first = ep.llm.requests[0]
    expected = ep.stage_tools_note(ep.root, subtask_tools("train_data_loading", ep.registry)
                                   if planner == "hierarchical_mcts" else None)
    assert first[-1] == {"role": "user", "content": expected}
    # hierarchical's masked note lists the same tools: its subtask offers the stage's tools
    assert expected == ep.stage_tools_note(ep.root)


def test_the_judge_and_the_reflector_get_no_note(workspace):
    ep, _ = _episode(workspace, "lats")
    ep.ask(ep.root, prompts.LATS_EVALUATOR_SYSTEM, prompts.EVALUATOR_REQUEST, purpose="evaluate")
    assert not any(prompts.is_stage_tools_note(m) for m in ep.llm.requests[-1])


# -- the context window ------------------------------------------------------------------------
class SmallWindow(SimPolicy):
    """The sim behind a context window of ``limit`` characters of messages (a server's 400 beyond it)."""

    def __init__(self, limit, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.limit, self.sizes = limit, []

    def _generate(self, messages, tools, n, temperature, seed):
        size = len(json.dumps(messages))
        self.sizes.append(size)
        if size > self.limit:
            raise ContextOverflowError(f"request of {size} characters exceeds the context window")
        return super()._generate(messages, tools, n, temperature, seed)


def _react_in_window(workspace, tmp_path, limit, context="full"):
    writer = TrajectoryWriter(tmp_path / "trajectory.jsonl")
    ep, config = _episode(workspace, "react", llm=SmallWindow(limit, 1.0, seed=3), trajectory=writer,
                          max_iterations=14, max_depth=14, context=context)
    result = PLANNERS["react"](ep, config).run()
    writer.close()
    return ep, result, list(read_trajectory(tmp_path / "trajectory.jsonl"))


def test_a_request_that_outgrows_the_window_is_sent_again_trimmed_and_the_search_goes_on(workspace, tmp_path):
    full, _, _ = _react_in_window(workspace, tmp_path / "wide", 10**9)
    trimmed, _, _ = _react_in_window(workspace, tmp_path / "trimmed", 10**9, context="trimmed")
    # a window the full history outgrows and the trimmed one (measured on the same task and seed) does not
    limit = (max(full.llm.sizes) + max(trimmed.llm.sizes)) // 2
    assert max(trimmed.llm.sizes) < limit < max(full.llm.sizes)
    ep, result, steps = _react_in_window(workspace, tmp_path / "narrow", limit)
    trimmed = [s for s in steps if s["step_type"] == "context_trimmed"]
    assert len(trimmed) == 1 and "exceeds the context window" in trimmed[0]["reason"]
    assert ep.trimming and "context window" not in result.stop_reason
    assert ep.tool_calls > len([s for s in full.llm.sizes if s <= limit])   # it went on past the overflow
    # the retried request and every later one fit: older results are cut as --context trimmed cuts them
    overflowed = [i for i, size in enumerate(ep.llm.sizes) if size > limit]
    assert len(overflowed) == 1 and all(size <= limit for size in ep.llm.sizes[overflowed[0] + 1:])


def test_a_trimmed_request_that_still_overflows_ends_the_search_cleanly(workspace, tmp_path):
    ep, result, steps = _react_in_window(workspace, tmp_path, 100)
    assert "outgrew the model's context window" in result.stop_reason
    assert [s["step_type"] for s in steps].count("context_trimmed") == 1 and ep.tool_calls == 0


# -- LATS's reflection depth -------------------------------------------------------------------
def test_the_reflection_depth_follows_the_call_budget():
    config = TrialConfig(planner="lats", model="sim", max_llm_calls=60, max_iterations=60, max_depth=60)
    # local model: 3 proposal calls + 3 judge calls per level, 10 levels at most, reflect at 5
    assert reflection_depth(config, calls_per_candidate=True) == 5
    assert reflection_depth(config, calls_per_candidate=False) == 7    # one request for 3 candidates: 15 levels
    assert reflection_depth(config.with_(max_llm_calls=None), True) == 30    # the iterations bound it
    assert reflection_depth(config.with_(max_depth=3), True) == 3
    assert reflection_depth(config.with_(max_llm_calls=4), True) == 1
    assert reflection_depth(config.with_(max_llm_calls=120, expansion_k=5), True) == 6


def test_lats_reflects_within_a_60_call_budget_at_the_reflection_depth(tmp_path, one_request_per_candidate):
    """The local model's setting (one call per candidate, 60 calls, max_depth 60, as in reports/local-llm.md):
    a path reaches the reflection depth, 5, within the budget and is reflected on there."""
    from mltb_core.runner.trial import run_trial

    config = TrialConfig(planner="lats", model="sim:0.5", llm_cache=False, max_llm_calls=60, max_iterations=60,
                         max_depth=60)
    record = run_trial(get_task(TASK), config, tmp_path)
    steps = list(read_trajectory(Path(record.trajectory)))
    depth = {0: 0}
    for step in steps:
        if step["step_type"] == "tool_execution_initiation":
            depth[step["node_id"]] = depth[step["parent_id"]] + 1
    reflected = [depth[s["node_id"]] for s in steps if s["step_type"] == "llm_call" and s["purpose"] == "reflect"]
    every = reflection_depth(config, calls_per_candidate=True)
    assert every == 5 and reflected and all(d % every == 0 for d in reflected), (reflected, every)
    assert record.llm_calls == 60 and max(depth.values()) < config.max_depth   # max_depth was never reached
    # once per expansion: the reflected nodes have different parents
    parents = {s["node_id"]: s["parent_id"] for s in steps if s["step_type"] == "tool_execution_initiation"}
    nodes = [s["node_id"] for s in steps if s["step_type"] == "llm_call" and s["purpose"] == "reflect"]
    assert len({parents[n] for n in nodes}) == len(nodes)


def _whole_tokens(texts) -> float:
    return sum(len(text) for text in texts) / prompts.CHARS_PER_TOKEN


def _bounded_walk(workspace, budget, planner="react"):
    """The expert's path under ``--context-budget budget``: (node's path, request) at each step."""
    ep, _ = _episode(workspace, planner, context_budget=budget)
    node, out = ep.root, []
    for call in load_expert(TASK):
        out.append((path_to(node), ep.proposal_messages(node, prompts.REACT_SYSTEM)))
        node = ep.step(node, Candidate("", [call]))
    return ep, out


def test_an_unset_context_budget_carries_every_result_whole(workspace):
    ep, _ = _episode(workspace)
    node = ep.root
    for call in load_expert(TASK):
        node = ep.step(node, Candidate("", [call]))
    request = ep.proposal_messages(node, prompts.REACT_SYSTEM)
    assert ep.compacted_steps(path_to(node)) == 0
    assert [m["content"] for m in request if m["role"] == "tool"] == [n.observation for n in path_to(node)[1:]]


def test_a_context_budget_bounds_the_whole_results_and_cuts_in_blocks(workspace):
    """Under the budget the path's results are whole; past it the oldest are cut to their first lines until the
    whole ones fit the low-water mark (the last few always whole). The cut point only moves forward and in
    blocks, so between two cuts each request extends the previous one."""
    budget = 2_000
    ep, walk = _bounded_walk(workspace, budget)
    counts = []
    for path, request in walk:
        steps = path[1:]
        count = ep.compacted_steps(path)
        results = [m["content"] for m in request if m["role"] == "tool"]
        assert results == ([prompts.trim_observation(s.observation) for s in steps[:count]]
                           + [s.observation for s in steps[count:]])
        last_few = prompts.TRIMMED_FULL_OBSERVATIONS   # always whole, not counted against the budget
        whole = _whole_tokens(results[count:max(len(results) - last_few, count)])
        assert whole <= budget, (count, whole)
        if counts and count > counts[-1]:   # a cut: down to the low-water mark
            assert whole <= budget * prompts.BOUNDED_LOW_WATER, (count, whole)
        counts.append(count)
    assert counts == sorted(counts) and counts[-1] > 0, counts
    cuts = sum(1 for a, b in zip(counts, counts[1:]) if b != a)
    assert 0 < cuts < (len(counts) - 1) / 2, counts   # blocks, not a cut per step
    for (_, request), (_, following), a, b in zip(walk, walk[1:], counts, counts[1:]):
        if a == b:
            kept = _kept(request, following)
            assert following[:len(kept)] == kept


def test_a_cut_drops_the_stage_notes_of_the_cut_steps(workspace):
    ep, walk = _bounded_walk(workspace, 2_000)
    path, request = walk[-1]
    count = ep.compacted_steps(path)
    assert count > 0
    # each note follows the step after which it was shown; none follows a cut step (nor the root, once cut)
    after, shown_after = None, []
    for message in request[2:]:
        if message["role"] == "tool":
            after = message["tool_call_id"]
        elif prompts.is_stage_tools_note(message):
            shown_after.append(after)
    cut_ids = {step.call_id for step in path[1:count + 1]}
    assert None not in shown_after and not set(shown_after) & cut_ids, (shown_after, cut_ids)
    assert _notes(request)[-1] == ep.stage_tools_note(path[-1])   # the current stage's note is always there
    unbounded, _ = _episode(workspace)
    node = unbounded.root
    for call in load_expert(TASK):
        unbounded.proposal_messages(node, prompts.REACT_SYSTEM)
        node = unbounded.step(node, Candidate("", [call]))
    assert len(_notes(unbounded.proposal_messages(node, prompts.REACT_SYSTEM))) > len(_notes(request))


def test_siblings_under_a_budget_share_their_parents_cut(workspace):
    """The cut point is decided once per node: a child's request starts with its parent's while the child adds
    no cut, whichever sibling asks first."""
    ep, walk = _bounded_walk(workspace, 2_000, "mcts_shaped")
    parent = walk[-1][0][-1]
    first = ep.proposal_messages(parent, prompts.EXPANSION_SYSTEM)
    checked = 0
    for call in load_expert(TASK)[-2:]:
        child = ep.step(parent, Candidate("", [call]))
        if ep.compacted_steps(path_to(child)) == ep.compacted_steps(path_to(parent)):
            request = ep.proposal_messages(child, prompts.EXPANSION_SYSTEM)
            kept = _kept(first, request)
            assert request[:len(kept)] == kept and len(kept) >= len(first) - 1
            checked += 1
    assert checked >= 1
    assert ep.proposal_messages(parent, prompts.EXPANSION_SYSTEM) == first


def test_long_last_results_still_cut_in_blocks(workspace):
    """The last three results are whole and do not count against the budget: a budget smaller than them
    still cuts in blocks, not a step at a time."""
    ep, walk = _bounded_walk(workspace, 500)
    counts = [ep.compacted_steps(path) for path, _ in walk]
    assert counts == sorted(counts) and counts[-1] > 0
    cuts = sum(1 for a, b in zip(counts, counts[1:]) if b != a)
    assert 0 < cuts < (len(counts) - 1) / 2, counts


def test_the_context_budget_is_hashed_only_when_set():
    # the hash of a default configuration on a46ee64, before the setting existed: recorded runs keep theirs
    assert TrialConfig(planner="react", model="sim").config_hash() == "989c7863b183"
    assert TrialConfig(planner="react", model="sim", context_budget=4_000).config_hash() != "989c7863b183"
    with pytest.raises(ValueError, match="context_budget"):
        TrialConfig(planner="react", model="sim", context_budget=10)
    with pytest.raises(ValueError, match="context_budget: a budget has no effect with context 'trimmed'"):
        TrialConfig(planner="react", model="sim", context="trimmed", context_budget=4_000)
