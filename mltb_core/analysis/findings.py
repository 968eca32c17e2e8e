"""What a run's trajectories show about where its trials ended (the ``trajectories`` report section).

Counted from the trajectory files the records name; every count says over how many trials it runs, and a
trial whose file is missing is named. Model-written names shown here are escaped for Markdown.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.results import counted_records
from mltb_core.analysis.safety import markdown as markdown_text
from mltb_core.analysis.tables import entry_label, entry_order, markdown_label
from mltb_core.stages.events import EventKind
from mltb_core.stages.specs import stage_index

__all__ = ["trajectory_findings", "reply_limit"]


def _trajectory(rec: TrialRecord) -> tuple[list[dict], int] | None:
    """A recorded trial's well-formed events and how many lines were skipped (malformed, or the whole file
    when it cannot be read), or None when its trajectory file is gone."""
    from mltb_core.analysis.sections import read_trajectory_of

    read = read_trajectory_of(rec)
    if read is None:
        return None
    return ([], 1) if isinstance(read, str) else (read.events, len(read.malformed))


def _of(steps: list[dict], kind: EventKind) -> Iterator[dict]:
    """The events of ``kind`` among ``steps``, in order."""
    return (step for step in steps if step.get("step_type") == kind)


def _budget(steps: list[dict]) -> int | None:
    """The trial's LLM-call budget, from its trial_start line."""
    start = next(_of(steps[:3], EventKind.TRIAL_START), None)
    config = start.get("config") if start else None
    value = config.get("max_llm_calls") if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def reply_limit(model: str) -> int | None:
    """Tokens a reply of ``model`` may run to, when mltb sets it (its named local models and GGUF files)."""
    from mltb_core.llm.backends import parse_model

    try:
        return parse_model(model).reply_limit()   # the backend's own rule (a local model's reply tokens)
    except ValueError:
        return None


def _calls(steps: list[dict]) -> list[dict]:
    """The tool calls a trajectory started, in order."""
    return [call for step in _of(steps, EventKind.TOOL_STARTED) for call in step.get("tools_to_execute", [])]


def _repeated_siblings(candidates: list) -> tuple[int, int]:
    """(candidates equal to an earlier one of the same request, candidates), by the planners' own rule
    (``Candidate.key``) on the recorded candidates."""
    from mltb_core.llm.base import candidate_key

    seen: set[str] = set()
    repeats = 0
    for cand in candidates:
        cand = cand if isinstance(cand, dict) else {"text": cand}
        calls = cand.get("tool_calls")
        key = candidate_key(calls[0] if isinstance(calls, list) and calls else None, cand.get("error"),
                            cand.get("text", ""))
        repeats += key in seen
        seen.add(key)
    return repeats, len(candidates)


@dataclass(frozen=True)
class _Trials:
    """The counted trials that have a trajectory, each with its events, and what every finding names them by."""
    have: list[tuple[TrialRecord, list[dict]]]
    entry: Callable[[TrialRecord], str]     # the tables' label of a record's entry
    order: dict[str, int]                   # an entry's place in the tables' order, by its Markdown label
    budget: str                             # the trials' LLM-call budget(s), "40" or "40/60" ("?" when unknown)
    reply_tokens: int | None                # the reply limit, when every trial's model has the same one

    def label(self, rec: TrialRecord) -> str:   # Markdown prose: a label may hold a model name from a records file
        return markdown_label(self.entry(rec))


def _judge(trials: _Trials) -> str | None:
    """LATS's judge: how many of its grades the parser read, and its share of the call budget."""
    judged = [steps for _, steps in trials.have if any(_of(steps, EventKind.JUDGE_SCORE))]
    if not judged:
        return None
    grades = [s for steps in judged for s in _of(steps, EventKind.JUDGE_SCORE)]
    per_trial = sorted(sum(s.get("n", 1) for s in _of(steps, EventKind.LLM_CALL) if s.get("purpose") == "evaluate")
                       for steps in judged)
    spread = f"{per_trial[0]}" if per_trial[0] == per_trial[-1] else f"{per_trial[0]}–{per_trial[-1]}"
    return (f"- LATS's judge gave a grade the parser read in {sum(bool(s.get('scored')) for s in grades)} "
            f"of {len(grades)} evaluations ({len(judged)} trials); the others counted as the lowest grade. "
            f"The judge's evaluations are LLM calls within the same {trials.budget}-call budget: {spread} of each "
            f"LATS trial's calls, the rest proposals.")


def _saved_frames(calls: list[dict]) -> list[str]:
    """The frames a trial's calls saved with ``save_dataframe_to_csv`` (its binding's name, "?" without one)."""
    return [c.get("tool_args", {}).get("bindings", {}).get("df", "?") for c in calls
            if c["tool_name"] == "save_dataframe_to_csv"]


def _calling(names: list[set[str]], tool: str) -> int:
    """How many trials (each the set of tools it called) called ``tool``."""
    return sum(tool in called for called in names)


def _fitted_without_submission(trials: _Trials) -> str | None:
    """The trials that fitted a model but wrote no valid submission: which of the finishing calls they made."""
    modeling = stage_index("modeling")
    fitted = [_calls(steps) for rec, steps in trials.have if rec.stage_reached >= modeling and not rec.valid]
    if not fitted:
        return None
    names = [{c["tool_name"] for c in calls} for calls in fitted]
    saves = [_saved_frames(calls) for calls in fitted]
    saved = sorted({frame for frames in saves for frame in frames})
    savers = sum(bool(frames) for frames in saves)
    return (f"- {len(fitted)} trial(s) fitted a model (stage {modeling}) without a valid submission; "
            f"{_calling(names, 'predict_target')} of them predicted with `predict_target`, "
            f"{_calling(names, 'convert_to_dataframe')} turned predictions into a frame with "
            f"`convert_to_dataframe`, {savers} called `save_dataframe_to_csv`"
            + (f" (saving {', '.join(markdown_text(s) for s in saved)}: names the model chose)" if saved else "")
            + f" and {len(fitted) - savers} never did. The paper's "
            "toolset has no `create_submission` (the extended toolset's attaches the ids in one call), so "
            "the file is assembled by hand: `get_features` for the ids, `convert_to_dataframe` for the "
            "predictions, `concatenate_dataframes` with `axis=1`, then `save_dataframe_to_csv`.")


def _react_repeats(trials: _Trials) -> str | None:
    """ReAct's tool calls that repeated an earlier one of the same trial, and how its prompt grew."""
    react = []
    for rec, steps in trials.have:
        if rec.planner != "react":
            continue
        keys = [json.dumps([c["tool_name"], c.get("tool_args")], sort_keys=True) for c in _calls(steps)]
        prompts = [(s.get("usage") or {}).get("prompt_tokens", 0) for s in _of(steps, EventKind.LLM_CALL)]
        growth = (f", prompt +{(prompts[-1] - prompts[0]) / (len(prompts) - 1):,.0f} tokens per call"
                  if len(prompts) > 1 else "")
        which = "" if trials.entry(rec) == rec.planner else f"{trials.label(rec)} on "
        react.append(f"{which}{rec.task} trial {rec.trial}: {len(keys) - len(set(keys))} of {len(keys)}{growth}")
    if not react:
        return None
    return ("- ReAct's tool calls that repeated an earlier call of the same trial (same tool, same "
            f"arguments): {'; '.join(sorted(react))}. Every reply and observation, repeats included, stays "
            "in the conversation ReAct sends back, until the context is full.")


def _repeated_candidates(trials: _Trials) -> str | None:
    """Per trial that asked for several candidates at once, how many repeated a sibling exactly."""
    repeated = []
    for rec, steps in trials.have:
        counts = [_repeated_siblings(s["candidates"]) for s in _of(steps, EventKind.LLM_CALL)
                  if s.get("purpose") == "propose" and len(s.get("candidates") or []) > 1]
        if counts:
            dup, total = sum(d for d, _ in counts), sum(t for _, t in counts)
            repeated.append((trials.order[trials.label(rec)], trials.label(rec), rec.task, rec.trial, dup, total))
    if not repeated:
        return None
    return ("- Candidates that repeated a sibling of the same expansion exactly (same tool, same arguments; "
            "dropped before they run, so they add no node, but each was sampled and its reply paid for), "
            "per trial that asked for several candidates at once: "
            + "; ".join(f"{p} on {t} trial {i}: {d} of {n} ({100 * d / n:.0f} %)"
                        for _, p, t, i, d, n in sorted(repeated)) + ".")


def _reads_test(calls: list[dict]) -> bool:
    return any(c["tool_name"] == "read_data" and "test" in str(
        c.get("tool_args", {}).get("func_kwargs", {}).get("filepath", "")) for c in calls)


def _concatenates_itself(calls: list[dict]) -> bool:
    return any(c["tool_name"] == "concatenate_train_test"
               and (b := c.get("tool_args", {}).get("bindings", {})).get("train_df")
               and b.get("train_df") == b.get("test_df") for c in calls)


def _stuck_at_stage_1(trials: _Trials) -> str | None:
    """The trials that ended at stage 1: how many never read the test file or concatenated a frame with itself."""
    stuck = [_calls(steps) for rec, steps in trials.have if rec.stage_reached == 1]
    if not stuck:
        return None
    never_test = sum(not _reads_test(calls) for calls in stuck)
    self_concat = sum(_concatenates_itself(calls) for calls in stuck)
    return (f"- {len(stuck)} trial(s) ended at stage 1 (train data loaded); {never_test} of them never "
            f"called `read_data` on the test file, and {self_concat} bound the same frame to both "
            "arguments of `concatenate_train_test`.")


def _feedback_shown(trials: _Trials) -> str | None:
    """Per planner, how many of its nodes' stage feedback reached the model."""
    shown: Counter[tuple[str, str]] = Counter()
    for rec, steps in trials.have:
        for step in _of(steps, EventKind.REWARD_FEEDBACK):
            shown[trials.label(rec), "all"] += 1
            shown[trials.label(rec), "shown"] += step.get("shown_to_model") is True
    if not shown:
        return None
    told = sorted({p for p, _ in shown}, key=trials.order.__getitem__)
    return ("- Stage feedback (the stage a node reached and what to do next, e.g. \"read the test CSV\") "
            "shown to the model after its tool calls, per planner: "
            + "; ".join(f"{p}: {shown[p, 'shown']} of {shown[p, 'all']}" for p in told)
            + ". By default mltb follows the paper (its section 5.1 gives this feedback to the MCTS "
            "variants), so ReAct and LATS see only each tool's own result; `--feedback` and "
            "`--no-feedback` set it for every planner.")


def _cut_off(trials: _Trials) -> str:
    """Per planner, the replies cut off at the reply limit (always said, zero included)."""
    from mltb_core.llm.base import CUT_OFF

    cut: Counter[tuple[str, str]] = Counter()
    for rec, steps in trials.have:
        label = trials.label(rec)
        for step in _of(steps, EventKind.LLM_CALL):
            if step.get("purpose") == "evaluate":    # LATS's judge replies in text: cut off when it used every token
                cut[label, "all"] += 1
                cut[label, "cut"] += bool(trials.reply_tokens) and \
                    (step.get("usage") or {}).get("completion_tokens", 0) >= trials.reply_tokens
            else:
                for cand in step.get("candidates") or []:
                    cut[label, "all"] += 1
                    cut[label, "cut"] += str(cand.get("error") or "").startswith(CUT_OFF)
    planners = sorted({p for p, _ in cut}, key=trials.order.__getitem__)
    limit = f"the {trials.reply_tokens}-token reply limit" if trials.reply_tokens else "the reply limit"
    return (f"- Replies cut off at {limit} (proposals reported to the model as cut off, and LATS judge "
            "replies that used every token), per planner: "
            + "; ".join(f"{p}: {cut[p, 'cut']} of {cut[p, 'all']}" for p in planners) + ".")


# The findings, in the order the section says them; each is one bullet, or None when no trial shows it.
_FINDINGS: tuple[Callable[[_Trials], str | None], ...] = (
    _judge, _fitted_without_submission, _react_repeats, _repeated_candidates, _stuck_at_stage_1, _feedback_shown,
    _cut_off)


def _counted_from(have: list, missing: list[str], skipped: Counter[str]) -> str:
    """The section's first sentence: over how many trials it counts, which had no file, which had bad lines."""
    bad = sorted(trial for trial, n in skipped.items() if n)
    return (f"Counted from the trajectories of {len(have)} of the {len(have) + len(missing)} counted trials"
            + (f" (no trajectory file in the run directory: {'; '.join(missing)})" if missing else "")
            + (f"; {sum(skipped.values())} malformed trajectory line(s) were skipped, in {'; '.join(bad)} (each "
               "trial's page names them)" if bad else "") + ".")


def _read_trials(recs: list, label: Callable[[TrialRecord], str]
                 ) -> tuple[list[tuple[TrialRecord, list[dict]]], list[str], Counter[str]]:
    """The counted trials with a trajectory (each with its events), those without one (named), and per trial
    how many of its lines were skipped."""
    have, missing = [], []
    skipped: Counter[str] = Counter()
    for rec in counted_records(recs):
        read = _trajectory(rec)
        if read is None:
            missing.append(f"{label(rec)} on {rec.task}, trial {rec.trial}")
        else:
            have.append((rec, read[0]))
            skipped[f"{label(rec)} on {rec.task}, trial {rec.trial}"] += read[1]
    return have, missing, skipped


def _trials(recs: list, have: list[tuple[TrialRecord, list[dict]]], entry: Callable[[TrialRecord], str],
            label: Callable[[TrialRecord], str]) -> _Trials:
    budgets = sorted({b for b in (_budget(steps) for _, steps in have) if b is not None})
    limits = sorted({t for t in (reply_limit(rec.model) for rec, _ in have) if t is not None})
    return _Trials(have, entry, {name: i for i, name in enumerate(entry_order(recs, label))},
                   "/".join(map(str, budgets)) or "?", limits[0] if len(limits) == 1 else None)


def trajectory_findings(recs: list) -> list[str]:
    """What the trials' trajectories show about where they ended (each record's trajectory an absolute path,
    as :meth:`RunStore.load` gives it):
    LATS's judge (graded or not), how trials that fitted a model failed to write a submission, ReAct's repeated
    calls, why trials stayed at stage 1, and replies cut off at the reply limit (:data:`_FINDINGS`, one function
    each). Each count says over how many trials it runs; a trial whose trajectory file is missing is named,
    never silently left out."""
    entry = entry_label(recs)    # the tables' labels: two configurations of a planner (an ablation) stay apart

    def label(rec: TrialRecord) -> str:   # Markdown prose: a label may hold a model name from a records file
        return markdown_label(entry(rec))

    have, missing, skipped = _read_trials(recs, label)
    lines = [_counted_from(have, missing, skipped), ""]
    if not have:
        return lines
    trials = _trials(recs, have, entry, label)
    return lines + [line for finding in _FINDINGS if (line := finding(trials)) is not None]
