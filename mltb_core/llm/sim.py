"""``sim``: a seeded synthetic policy — NOT an LLM — for free, deterministic runs and CI gating.

It answers three kinds of request, told apart by the request itself (never by which planner sends it):
tools offered → propose tool calls; no tools and a 'Score: N' asked for → judge the trajectory; no tools
otherwise → reflect on it in free text. Its beliefs live in its own replies ("notes: done=...; doing=..."),
so they travel in the message history like an LLM's context does.

Assumptions (every planner-ordering figure measured with ``sim`` rests on them):

1. **Planner-agnostic.** It reads the shared preamble (the first system message: task description and
   tool catalogue), the names of the offered tools, its own earlier replies, tool results and errors,
   stage feedback and reflections on earlier failures, i.e. what the messages say. It never reads the
   planner's instructions (the later system messages), so which planner asks, or how it words its
   instructions, changes no choice. Every choice is drawn from an RNG seeded by (policy seed, skill,
   request seed, the preamble, the conversation after the system messages, the offered tool names,
   candidate index): the same context gives the same candidates whichever planner wraps it.
2. **One fixed pipeline**, in order: load train, load test, inspect, combine train+test, fill numeric
   gaps (median), fill the rest (mode; drops columns still missing), drop id/name-like columns, expand
   a datetime column, label-encode categoricals, split back, train features/target, test features,
   fit (LightGBM 55 %, XGBoost 20 %, random forest 15 %, linear 10 %; cv=3; a random forest when the
   prompt says the metric is a logarithmic error, which rejects negative predictions), predict, write the
   submission. With ``create_submission`` offered (extended toolset) one call writes the file; without
   it (paper toolset) it takes the id column from the test data (``get_features``), names the
   predictions after the target (``convert_to_dataframe``), joins them (``concatenate_dataframes``,
   axis=1) and saves the frame (``save_dataframe_to_csv``). No feature engineering beyond that, and no
   tuning unless the chosen ``fit_*`` tool is not offered but the same model's ``tune_*`` tool is (then it
   calls that): its leaderboard figures are a floor, not an LLM's.
3. **Skill sets the error rates**, per proposed step: mistake probability {MISTAKE_SCALE} × (1 − skill), times
   {REFLECTION_FACTOR} when reflections on earlier failures are in the context; mistakes are the ones agents make (wrong
   object names, objects passed as plain values, wrong file paths, skipped cleaning/encoding, dropping
   rows, one-hot blow-ups, wrong or misspelt target, predicting on the training frame, saving the bare
   predictions as the submission, out-of-order calls). After a failed call it retries correctly with
   probability {FIX_BASE} + {FIX_SLOPE} × skill; it heeds a tool error or a stage check (goes back to the step
   they point at) with probability {HEED_BASE} + {HEED_SLOPE} × skill; after {GIVE_UP_AFTER} or more failures in a
   row it gives up with probability {GIVE_UP_SCALE} × (1 − skill). Mistakes are independent across steps and
   candidates.
4. **Tools it is not offered** (tool masking, the toolset) are never called: a step whose tool is not
   offered waits for a later request; a step with nothing to do (no datetime column) is skipped.
5. **As a judge** its score is 1 + 9 × (share of the 18 pipeline steps that successful tool calls in
   the trajectory accomplished, each counted once, whatever tool did it) plus Gaussian noise of fixed
   standard deviation :data:`JUDGE_NOISE_SD` = {JUDGE_NOISE_SD:g} point, rounded and clipped to 1..10. The noise does not
   depend on the trajectory's length, the planner or anything else; failed calls cost no points.
6. **As a reflector** it restates the last observation and a generic lesson (no insight beyond that).
7. **Costs**: tokens = characters / 4, one request = one LLM call whatever the number of candidates,
   no dollars, no latency model. The sampling temperature is ignored (the k candidates of one request
   differ through their own RNG streams).
8. **Neutral setting** (model string ``sim:<skill>:neutral``, a sensitivity run): the three effects of an
   input only some planners send are made the same for every planner's inputs: reflections change no
   rate (factor 1; only LATS sends them), stage checks are never heeded (only the tree searches receive
   them; tool errors, which every planner sees, are still heeded as in 3), and as a judge its score is
   the midpoint 5.5 plus the same noise, whatever the trajectory shows (only LATS asks for one). Every
   other rate, and every random draw, is the default's, so a neutral trial differs from the default one
   only where those inputs change a choice.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import time
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable
from typing import Any

from mltb_core.llm import prompts
from mltb_core.toolkit.registry import REGISTRY, ToolCall
from mltb_core.bench.tasks import SUBMISSION_FILE, TEST_FILE, TRAIN_FILE
from mltb_core.llm.backends import SIM_NEUTRAL as NEUTRAL   # the model-string word of assumption 8
from mltb_core.llm.base import Candidate, LLMBackend, LLMResponse, Usage

__all__ = ["SimPolicy", "PIPELINE", "RATES", "NEUTRAL", "ordering_assumptions"]

# The policy's rates (assumption 3), defined here once: the docstring, the policy and every report that prints
# a planner ordering measured with sim read them.
MISTAKE_SCALE = 0.6        # per-step mistake probability = MISTAKE_SCALE × (1 − skill)
REFLECTION_FACTOR = 0.75   # ... times this when reflections on earlier failures are in the context
FIX_BASE, FIX_SLOPE = 0.35, 0.6      # retry correctly after a failed call: FIX_BASE + FIX_SLOPE × skill
HEED_BASE, HEED_SLOPE = 0.55, 0.45   # heed a tool error or a stage check: HEED_BASE + HEED_SLOPE × skill
GIVE_UP_AFTER, GIVE_UP_SCALE = 3, 0.5   # after GIVE_UP_AFTER failures in a row: give up w.p. GIVE_UP_SCALE × (1 − skill)
JUDGE_NOISE_SD = 1.0       # standard deviation (points on the 1-10 scale) of the judge's noise; fixed (assumption 5)
RATES = {"MISTAKE_SCALE": MISTAKE_SCALE, "REFLECTION_FACTOR": REFLECTION_FACTOR, "FIX_BASE": FIX_BASE,
         "FIX_SLOPE": FIX_SLOPE, "HEED_BASE": HEED_BASE, "HEED_SLOPE": HEED_SLOPE, "GIVE_UP_AFTER": GIVE_UP_AFTER,
         "GIVE_UP_SCALE": GIVE_UP_SCALE, "JUDGE_NOISE_SD": JUDGE_NOISE_SD}
NEUTRAL_JUDGE_PROGRESS = 0.5   # the neutral judge scores every trajectory as if half the pipeline were shown
if __doc__:   # None under python -OO
    __doc__ = __doc__.format(**RATES)


def ordering_assumptions(skill: float, neutral: bool = False) -> str:
    """The assumptions of the policy that can order planners (each reaches only some planners' requests), with
    their rates at ``skill``: printed beside every planner ordering measured with sim."""
    mistakes = MISTAKE_SCALE * (1.0 - skill)
    if neutral:
        return (f"sim's neutral setting (a sensitivity run; mltb_core/llm/sim.py, assumption 8) at skill {skill:g}: "
                f"the inputs only some planners send change nothing: reflections (only LATS) leave the per-step "
                f"mistake rate at {mistakes:.3g}; stage feedback (only the tree searches) is never heeded, while tool "
                f"errors (every planner) are heeded with probability {HEED_BASE + HEED_SLOPE * skill:.3g}; as LATS's "
                f"judge it scores {1 + 9 * NEUTRAL_JUDGE_PROGRESS:g} plus Gaussian noise of sd {JUDGE_NOISE_SD:g} "
                "point whatever the trajectory shows; every other rate is the default's")
    return ("sim's rates that can order planners (assumptions, not measurements; mltb_core/llm/sim.py) at skill "
            f"{skill:g}: reflections on earlier failures (only LATS sends them) cut the per-step mistake rate by "
            f"{1 - REFLECTION_FACTOR:.0%} ({mistakes:.3g} → {mistakes * REFLECTION_FACTOR:.3g}); stage feedback (only "
            f"the tree searches receive it) and tool errors are heeded with probability "
            f"{HEED_BASE + HEED_SLOPE * skill:.3g}; a failed call is retried correctly with probability "
            f"{FIX_BASE + FIX_SLOPE * skill:.3g}; after {GIVE_UP_AFTER} failures in a row it gives up with "
            f"probability {GIVE_UP_SCALE * (1 - skill):.3g}; as LATS's judge it scores the share of pipeline steps "
            f"the trajectory shows (an oracle) plus Gaussian noise of sd {JUDGE_NOISE_SD:g} point")

# The pipeline the policy follows, in order. submit_ids/submit_frame/submit_join assemble the submission frame
# by hand when no create_submission tool is offered (the paper's toolset); with it they have nothing to do.
PIPELINE = ("load_train", "load_test", "inspect", "combine", "fill_numeric", "fill_rest", "drop_ids",
            "datetime", "encode", "split", "xy_train", "x_test", "fit", "predict", "submit_ids", "submit_frame",
            "submit_join", "submit")
# What a judge credits: the pipeline step a successful call accomplishes, by tool (see _steps_shown).
STEP_OF_TOOL = {
    "concatenate_train_test": "combine", "fillna_with_median": "fill_numeric", "fillna_with_mean": "fill_numeric",
    "fillna_with_mode": "fill_rest", "fillna_with_value": "fill_rest", "drop_rows_with_missing": "fill_rest",
    "extract_datetime_features": "datetime", "encode_all_categorical_columns": "encode", "label_encode": "encode",
    "one_hot_encode": "encode", "split_combined_into_train_test": "split", "predict_target": "predict",
    "get_dataframe_summary": "inspect", "get_dataframe_dtypes_summary": "inspect", "get_missing_summary": "inspect",
}
# Stage feedback / tool errors → the step whose belief they refute.
FEEDBACK_STEPS = (
    ("Train data not loaded", "load_train"), ("Test data not loaded", "load_test"),
    ("not combined", "combine"), ("is gone; recombine", "combine"),
    ("Data cleaning incomplete", "fill_rest"), ("needs a combined frame without missing", "fill_rest"),
    ("still unencoded", "encode"), ("Feature count blew up", "encode"),
    ("Split the encoded", "split"), ("split frames still have", "split"), ("Split did not give", "split"),
    ("extracted target is", "xy_train"), ("Convert the train frame", "xy_train"),
    ("Test features do not match", "x_test"), ("Convert the split test frame", "x_test"),
    ("have the training columns, but", "x_test"), ("still holds the target column", "x_test"), ("trained on other columns", "fit"), ("No fitted model", "fit"), ("submission is invalid", "predict"), ("No submission written", "submit"),
)
ERROR_STEPS = (
    (re.compile(r"missing value|contains nan|needs complete columns|input . contains nan|NaN", re.I), "fill_rest"),
    (re.compile(r"object|string|text column|categor|could not convert|encode", re.I), "encode"),
    (re.compile(r"length|rows? .*(differ|mismatch)|does not match the number", re.I), "predict"),
)
SKIPPABLE = {"inspect", "fill_rest", "drop_ids", "datetime", "encode"}
NAME_LIKE = ("Name", "Surname", "name", "key", "CustomerId", "idhogar", "ID_code", "ID")
NOTES = re.compile(r"notes: done=([\w,]*); doing=(\w*)")
# A plain-text request that asks for a score is a request to judge (whoever sends it).
SCORE_REQUEST = re.compile(r"score\W{0,3}N\b", re.I)


@dataclass
class TaskInfo:
    train_path: str = TRAIN_FILE
    test_path: str = TEST_FILE
    output_path: str = SUBMISSION_FILE
    target: str = "target"
    id_column: str = "id"
    regression: bool = False
    probability: bool = False
    logarithmic: bool = False   # scored by a logarithmic error: predictions must not go below 0


@dataclass
class Step:
    call: ToolCall | None
    observation: str


@dataclass
class State:
    info: TaskInfo
    history: list[Step]
    done: list[str]               # steps the policy believes done (from its last note)
    doing: str                    # the step its last reply attempted
    objects: dict[str, str]       # visible scratchpad names → listing line
    roles: dict[str, str] = field(default_factory=dict)
    offered: set[str] = field(default_factory=set)
    reflections: bool = False
    judge_request: bool = False   # a plain-text request asking for a score

    @property
    def last(self) -> Step | None:
        return self.history[-1] if self.history else None

    @property
    def last_failed(self) -> bool:
        return bool(self.last and self.last.observation.startswith(("Error", "Your reply contained no valid")))

    def consecutive_failures(self) -> int:
        count = 0
        for step in reversed(self.history):
            if not step.observation.startswith(("Error", "Your reply contained no valid")):
                break
            count += 1
        return count


class SimPolicy(LLMBackend):
    """The synthetic policy; ``skill`` in [0, 1] sets how often it errs and how well it recovers."""

    synthetic = True

    def __init__(self, skill: float = 0.7, seed: int = 0, neutral: bool = False, **_: Any):
        super().__init__(f"sim:{skill:g}" + (f":{NEUTRAL}" if neutral else ""), seed=seed)
        self.skill = float(skill)
        self.neutral = bool(neutral)
        self.mistake_rate = MISTAKE_SCALE * (1.0 - self.skill)
        self.fix_rate = FIX_BASE + FIX_SLOPE * self.skill
        self.heed_rate = HEED_BASE + HEED_SLOPE * self.skill
        self.reflection_factor = 1.0 if self.neutral else REFLECTION_FACTOR

    # -- backend API -------------------------------------------------------------------
    def _generate(self, messages: list[dict], tools: list[dict], n: int, temperature: float,
                  seed: int | None) -> LLMResponse:
        start = time.perf_counter()
        state = self._read(messages, tools)
        # The planner's instructions (system messages after the preamble) are left out: the same context draws
        # the same choices whichever planner asks (assumption 1). The offered tools are information, so they count.
        turns = _conversation_start(messages)
        # The stage's parameter note is left out too: the policy knows the tools' parameters without it.
        conversation = [m for m in messages[turns:] if not prompts.is_stage_tools_note(m)]
        context = [self.seed, self.skill, seed, messages[:1], conversation, sorted(state.offered)]
        digest = hashlib.sha256(_portable(json.dumps(context, sort_keys=True, default=str),
                                          state.info).encode()).hexdigest()
        candidates = []
        for i in range(n):
            rng = random.Random(f"{digest}:{i}")
            if tools:
                candidates.append(self._act(state, rng))
            elif state.judge_request:
                candidates.append(Candidate(self._judge(state, rng)))
            else:
                candidates.append(Candidate(self._reflect(state)))
        prompt_chars = len(_portable(json.dumps(messages, default=str), state.info)) + len(json.dumps(tools))
        out_chars = sum(len(c.text) + sum(len(_portable(t.key(), state.info)) for t in c.tool_calls)
                        for c in candidates)
        usage = Usage(prompt_tokens=prompt_chars // 4, completion_tokens=out_chars // 4, calls=1,
                      seconds=time.perf_counter() - start)
        return LLMResponse(candidates, usage)

    # -- reading the context --------------------------------------------------------------
    def _read(self, messages: list[dict], tools: list[dict]) -> State:
        start = _conversation_start(messages)
        transcript = _Transcript()
        for msg in messages[start:]:
            if not prompts.is_stage_tools_note(msg):
                transcript.read(msg)
        info = parse_task_prompt(prompts.task_section(str(messages[0].get("content") or "")) if messages else "")
        offered = {t.get("function", {}).get("name", "") for t in tools}
        state = State(info, transcript.history, transcript.done, transcript.doing,
                      _scratchpad_objects(transcript.history), offered=offered,
                      reflections=transcript.reflections, judge_request=_asks_for_score(messages, tools, start))
        state.roles = self._roles(state)
        return state

    def _roles(self, state: State) -> dict[str, str]:
        """Which object plays which part, from the successful calls in the history."""
        roles: dict[str, str] = {}
        for step in state.history:
            call = step.call
            if call is None or step.observation.startswith("Error"):
                continue
            given = _roles_given(state, call, roles)
            roles.update(given if given is not None else _renamed_combined(call, roles))
        return roles

    @staticmethod
    def _steps_shown(state: State) -> list[str]:
        """Pipeline steps that successful calls in the trajectory accomplished (what a judge can see)."""
        shown: set[str] = set()
        for step in state.history:
            call = step.call
            if call is None or step.observation.startswith("Error"):
                continue
            name, kwargs = call.tool_name, call.func_kwargs
            if name == "read_data":
                shown.add("load_test" if "test" in _basename(kwargs.get("filepath", "")) else "load_train")
            elif name == "drop_feature":
                shown.add("drop_ids")
            elif name == "convert_dataframe_to_features_target":
                shown.add("xy_train" if kwargs.get("is_train", True) else "x_test")
            elif REGISTRY.fits_model(name):
                shown.add("fit")
            elif name == "get_features" and kwargs.get("columns") in (state.info.id_column, [state.info.id_column]):
                shown.add("submit_ids")
            elif name == "convert_to_dataframe":
                shown.add("submit_frame")
            elif name == "concatenate_dataframes":
                shown.add("submit_join")
            elif name in ("save_dataframe_to_csv", "create_submission") and _basename(
                    kwargs.get("filepath", SUBMISSION_FILE)) == _basename(state.info.output_path):
                shown.add("submit")
            elif name in STEP_OF_TOOL:
                shown.add(STEP_OF_TOOL[name])
        return [step for step in PIPELINE if step in shown]

    # -- acting --------------------------------------------------------------------------
    def _act(self, state: State, rng: random.Random) -> Candidate:
        done = list(state.done)
        if state.last_failed and state.doing in done:  # the attempt failed: the step is not done
            done = done[: done.index(state.doing)]
        heed = rng.random() < self.heed_rate
        feedback = state.last.observation if state.last else ""
        # the neutral setting draws the same heed but ignores stage checks (only tree searches receive them)
        if heed and not self.neutral and "Stage check:" in feedback:
            for marker, step in FEEDBACK_STEPS:
                if marker in feedback.split("Stage check:", 1)[1] and step in done:
                    done = done[: done.index(step)]
                    break
        if state.last_failed and state.doing and heed:
            error_text = feedback.split("Please fix your mistakes", 1)[0]
            for pattern, step in ERROR_STEPS:
                if step in done and step != state.doing and pattern.search(error_text):
                    done = done[: done.index(step)]
                    break
        step, done, waiting = self._plan(state, done, self._next_step(state, done), rng)
        if step is None:
            return self._finished(done, waiting)
        mistake_rate = self.mistake_rate * (self.reflection_factor if state.reflections else 1.0)
        if state.last_failed and state.doing == step:
            failures = state.consecutive_failures()
            if failures >= GIVE_UP_AFTER and rng.random() < GIVE_UP_SCALE * (1.0 - self.skill):
                return self._say(done, "", "I keep hitting errors and cannot fix them; stopping here.")
            if rng.random() < self.fix_rate:
                return self._correct(state, done, step, rng)
            return self._mistake(state, done, step, rng)
        if rng.random() < mistake_rate:
            return self._mistake(state, done, step, rng)
        return self._correct(state, done, step, rng)

    @staticmethod
    def _next_step(state: State, done: list[str], waiting: Iterable[str] = ()) -> str | None:
        """The first pipeline step neither believed done nor waiting for a tool that is not offered."""
        skip = set(done) | set(waiting)
        return next((step for step in PIPELINE if step not in skip), None)

    def _say(self, done: list[str], doing: str, text: str, call: ToolCall | None = None) -> Candidate:
        note = f"(notes: done={','.join(done)}; doing={doing})"
        return Candidate(f"Thought: {text} {note}", [call] if call else [])

    def _plan(self, state: State, done: list[str], step: str | None,
              rng: random.Random) -> tuple[str | None, list[str], list[str]]:
        """From ``step`` on, the first step it can act on now: (step or None, believed done, waiting steps)."""
        waiting: list[str] = []   # steps whose tool is not offered now (masking, toolset): for a later request
        while step is not None:
            call = self._call_for(state, step, rng)
            if call is None:      # nothing to do for this step here (e.g. no datetime column): believe it done
                done = done + [step]
            elif call.tool_name not in state.offered:
                waiting.append(step)
            else:
                return step, done, waiting
            step = self._next_step(state, done, waiting)
        return None, done, waiting

    def _correct(self, state: State, done: list[str], step: str | None, rng: random.Random) -> Candidate:
        step, done, waiting = self._plan(state, done, step, rng)
        if step is not None:
            call = self._call_for(state, step, rng)
            return self._say(done + [step], step, f"Next I will {step.replace('_', ' ')}.", call)
        return self._finished(done, waiting)

    def _finished(self, done: list[str], waiting: list[str]) -> Candidate:
        if waiting:
            return self._say(done, "", f"The tools I need next ({waiting[0].replace('_', ' ')}) are not available "
                                       "here; nothing more to do with these tools.")
        return self._say(done, "", "The submission file is written; the task is complete.")

    def _call_for(self, state: State, step: str, rng: random.Random) -> ToolCall | None:
        """The correct call for pipeline ``step`` in ``state``; None when the step has nothing to do here."""
        return step_call(state, step, rng)

    def _mistake(self, state: State, done: list[str], step: str, rng: random.Random) -> Candidate:
        """One of the typical agent mistakes that fit this step."""
        call = self._call_for(state, step, rng)
        kind = rng.choice(_mistake_kinds(step, call))
        if call is None or kind == "skip":
            return self._skip(state, done, step, rng)
        call = _MISTAKES[kind](state, call, step, rng)
        if call.tool_name not in state.offered and state.offered:
            return self._correct(state, done, step, rng)  # masking removed the tool this mistake needed
        return self._say(done + [step], step, f"Next I will {step.replace('_', ' ')}.", call)

    def _skip(self, state: State, done: list[str], step: str, rng: random.Random) -> Candidate:
        """Believe ``step`` done and go on: a silent mistake that surfaces later, if at all (when there is no
        later step to go on to, it makes the step's call after all)."""
        nxt = self._next_step(state, done + [step])
        if nxt is None or nxt == step:
            return self._correct(state, done, step, rng)
        return self._correct(state, done + [step], nxt, rng)

    # -- judging (LATS) ----------------------------------------------------------------------
    def _judge(self, state: State, rng: random.Random) -> str:
        """What the trajectory shows, plus noise of fixed scale (assumption 5); neutral: the midpoint plus that
        noise, whatever it shows (assumption 8)."""
        shown = self._steps_shown(state)
        progress = NEUTRAL_JUDGE_PROGRESS if self.neutral else len(shown) / len(PIPELINE)
        score = int(round(min(10.0, max(1.0, 1.0 + 9.0 * progress + rng.gauss(0.0, JUDGE_NOISE_SD)))))
        if self.neutral:
            return f"I cannot tell how far this trajectory got. Score: {score}"
        return (f"The trajectory shows {len(shown)} of the {len(PIPELINE)} pipeline steps done "
                f"({', '.join(shown) or 'none'}). Score: {score}")

    def _reflect(self, state: State) -> str:
        last = state.last.observation.splitlines()[0][:200] if state.last else "no progress"
        return f"The attempt ended after: {last}. Next time check each stage's output before moving on."


# --------------------------------------------------------------------------- helpers
def _conversation_start(messages: list[dict]) -> int:
    """Index of the first message after the leading system messages (preamble, then instructions)."""
    start = 1 if messages else 0   # the first message is the preamble, whatever its role
    while start < len(messages) and messages[start].get("role") == "system":
        start += 1
    return start


def _asks_for_score(messages: list[dict], tools: list[dict], start: int) -> bool:
    """A request to judge: no tools offered and a score asked for. Only the request's form is read from the
    instructions (the system messages after the preamble), never which planner wrote them."""
    if tools:
        return False
    instructions = " ".join(str(m.get("content") or "") for m in messages[1:start])
    last_user = next((str(m.get("content") or "") for m in reversed(messages)
                      if m.get("role") == "user" and not prompts.is_stage_tools_note(m)), "")
    return bool(SCORE_REQUEST.search(instructions) or SCORE_REQUEST.search(last_user))


def _first_call(msg: dict) -> ToolCall | None:
    """An assistant message's first tool call (None when it has none or it does not parse)."""
    calls = msg.get("tool_calls") or []
    if not calls:
        return None
    fn = calls[0].get("function", {})
    try:
        return ToolCall.from_arguments(fn.get("name", ""), fn.get("arguments", "{}"))
    except ValueError:
        return None


@dataclass
class _Transcript:
    """The conversation after the system messages, read message by message: the steps taken (a call and what
    came back), the policy's beliefs from its own last note, and whether reflections were shared."""
    history: list[Step] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    doing: str = ""
    reflections: bool = False
    pending: ToolCall | None = None     # the last reply's call, waiting for its result

    def read(self, msg: dict) -> None:
        role, content = msg.get("role"), str(msg.get("content") or "")
        if role == "assistant":
            self._reply(msg, content)
        elif role == "tool":
            self.history.append(Step(self.pending, content))
            self.pending = None
        elif role == "user":
            self._user(content)

    def _reply(self, msg: dict, content: str) -> None:
        notes = NOTES.search(content)
        if notes:   # the beliefs travel in the policy's own replies, like an LLM's context
            self.done = [s for s in notes.group(1).split(",") if s]
            self.doing = notes.group(2)
        self.pending = _first_call(msg)

    def _user(self, content: str) -> None:
        if content.startswith(prompts.REFLECTIONS_HEADER):
            self.reflections = True
        elif self.history or self.pending is not None or content.startswith("Your reply"):
            # a step's feedback (stage checks, a reply with no valid call); a user turn before any step is none
            self.history.append(Step(None, content))


def _scratchpad_objects(history: list[Step]) -> dict[str, str]:
    """Visible scratchpad names → listing line, from the listings in the observations."""
    objects: dict[str, str] = {}
    for step in history:  # later listings win; a line with columns is kept until the name is rewritten
        if prompts.SCRATCHPAD_HEADER not in step.observation:
            continue
        listing = step.observation.split(prompts.SCRATCHPAD_HEADER, 1)[1]
        for line in listing.split("\n\n", 1)[0].splitlines():
            m = re.match(r"- ([^:]+): (.*)", line.strip())
            if m and ("columns=[" in m.group(2) or m.group(1) not in objects):
                objects[m.group(1)] = m.group(2)
    return objects


# -- roles: which object plays which part (see SimPolicy._roles) -----------------------------------------
# Each rule reads one tool's successful call: the roles its output takes, or None when the call gives none by
# this rule (then the generic one applies: a call on the combined frame moves that role to its output).
RoleRule = Callable[[State, ToolCall, dict[str, str]], dict[str, str] | None]


def _read_data_roles(state: State, call: ToolCall, roles: dict[str, str]) -> dict[str, str] | None:
    path = str(call.func_kwargs.get("filepath", ""))
    which = "test" if "test" in path.rsplit("/", 1)[-1] else "train"
    return {which: call.output if isinstance(call.output, str) else "data"}


def _combine_roles(state: State, call: ToolCall, roles: dict[str, str]) -> dict[str, str] | None:
    return {"combined": call.output} if isinstance(call.output, str) else None


def _split_roles(state: State, call: ToolCall, roles: dict[str, str]) -> dict[str, str] | None:
    out = call.output
    if isinstance(out, list) and len(out) == 2:
        return {"train_part": out[0], "test_part": out[1]}
    return None


def _features_target_roles(state: State, call: ToolCall, roles: dict[str, str]) -> dict[str, str] | None:
    out = call.output
    if call.func_kwargs.get("is_train", True) and isinstance(out, list) and len(out) == 2:
        return {"X_train": out[0], "y_train": out[1]}
    return {"X_test": out} if isinstance(out, str) else {}


def _model_roles(state: State, call: ToolCall, roles: dict[str, str]) -> dict[str, str] | None:
    return {"model": call.output} if isinstance(call.output, str) else None


def _predictions_roles(state: State, call: ToolCall, roles: dict[str, str]) -> dict[str, str] | None:
    return {"preds": call.output} if isinstance(call.output, str) else None


def _ids_roles(state: State, call: ToolCall, roles: dict[str, str]) -> dict[str, str] | None:
    id_column = state.info.id_column
    if isinstance(call.output, str) and call.func_kwargs.get("columns") in (id_column, [id_column]):
        return {"ids": call.output}
    return None


def _prediction_frame_roles(state: State, call: ToolCall, roles: dict[str, str]) -> dict[str, str] | None:
    if isinstance(call.output, str) and call.bindings.get("data") == roles.get("preds"):
        return {"pred_frame": call.output}
    return None


def _submission_roles(state: State, call: ToolCall, roles: dict[str, str]) -> dict[str, str] | None:
    if isinstance(call.output, str) and call.bindings.get("df1") == roles.get("ids"):
        return {"submission": call.output}
    return None


_ROLE_RULES: dict[str, RoleRule] = {
    "read_data": _read_data_roles, "concatenate_train_test": _combine_roles,
    "split_combined_into_train_test": _split_roles, "convert_dataframe_to_features_target": _features_target_roles,
    "predict_target": _predictions_roles, "get_features": _ids_roles,
    "convert_to_dataframe": _prediction_frame_roles, "concatenate_dataframes": _submission_roles,
}


def _roles_given(state: State, call: ToolCall, roles: dict[str, str]) -> dict[str, str] | None:
    """The roles ``call``'s own rule gives (a fit tool's: the model); None when no rule gives any."""
    rule = _ROLE_RULES.get(call.tool_name)
    if rule is None and REGISTRY.fits_model(call.tool_name):
        rule = _model_roles
    return rule(state, call, roles) if rule is not None else None


def _renamed_combined(call: ToolCall, roles: dict[str, str]) -> dict[str, str]:
    """A call on the combined frame whose output has a name of its own: that is the combined frame now."""
    if "df" in call.bindings and call.bindings["df"] == roles.get("combined") and isinstance(call.output, str):
        return {"combined": call.output}
    return {}


def parse_task_prompt(text: str) -> TaskInfo:
    """What the policy needs from the task prompt: paths, id column, target, problem kind."""
    info = TaskInfo()
    m = re.search(r"(\S*train\.csv)", text)
    if m:
        info.train_path = m.group(1).rstrip(".,")
    m = re.search(r"(\S*test\.csv)", text)
    if m:
        info.test_path = m.group(1).rstrip(".,")
    m = re.search(r"CSV format to (\S+?)\.?\s*$", text, re.M)
    if m:
        info.output_path = m.group(1)
    section = text.split("## Submission File Format", 1)[-1]
    bullets = re.findall(r"^- (\S+) [–-] (.*)$", section, re.M)
    if len(bullets) >= 2:
        info.id_column, info.target = bullets[0][0], bullets[1][0]
        info.probability = "probability" in bullets[1][1]
        info.regression = "predicted value" in bullets[1][1]
    info.logarithmic = "logarithmic error" in text
    return info


def _portable(text: str, info: TaskInfo) -> str:
    """The run's directories replaced by placeholders: the same trial draws the same choices anywhere."""
    for path, mark in ((info.train_path, "<DATA>"), (info.output_path, "<SANDBOX>")):
        folder = path.rsplit("/", 1)[0] if "/" in path else ""
        if folder:
            text = text.replace(folder, mark)
    return text


def _basename(path: Any) -> str:
    return str(path).replace("\\", "/").rsplit("/", 1)[-1]


def _columns(listing: str) -> list[str]:
    m = re.search(r"columns=\[(.*?)\]$", listing)
    if not m:
        return []
    return [part.rsplit(":", 1)[0].strip() for part in m.group(1).split(", ") if ":" in part]


def _feedback_nan_columns(state: State) -> list[str]:
    text = state.last.observation if state.last else ""
    m = re.search(r"missing values remain in \d+ column\(s\): (.*?)(?:\.|$)", text, re.M)
    if not m:
        return []
    return [re.sub(r" \(\d+\)$", "", part.strip()) for part in m.group(1).split(", ") if part.strip()]


def _times_done(state: State, tool: str) -> int:
    return sum(1 for s in state.history if s.call is not None and s.call.tool_name == tool
               and not s.observation.startswith("Error"))


# --------------------------------------------------------------------------- the correct call of each step
# One builder per pipeline step (assumption 2): the call a careful agent makes for it in ``state``, or None when
# the step has nothing to do there. Only the model family is drawn from the request's RNG; the other builders
# take it so that all have one signature.
CallBuilder = Callable[[State, random.Random], ToolCall | None]


def step_call(state: State, step: str, rng: random.Random) -> ToolCall | None:
    """The correct call for pipeline ``step`` in ``state`` (None: nothing to do for it here)."""
    build = _STEP_CALLS.get(step)
    if build is None:
        raise ValueError(f"unknown pipeline step {step!r}")
    return build(state, rng)


def _combined(state: State) -> str:
    return state.roles.get("combined", "combined")


def _one_call_submission(state: State) -> bool:
    """create_submission is offered: it attaches the ids itself, so the hand-made frame's steps have nothing to do."""
    return "create_submission" in state.offered


def _load_train_call(state: State, rng: random.Random) -> ToolCall:
    return ToolCall("read_data", {}, {"filepath": state.info.train_path}, "train")


def _load_test_call(state: State, rng: random.Random) -> ToolCall:
    return ToolCall("read_data", {}, {"filepath": state.info.test_path}, "test")


def _inspect_call(state: State, rng: random.Random) -> ToolCall:
    return ToolCall("get_dataframe_summary", {"df": state.roles.get("train", "train")}, {})


def _combine_call(state: State, rng: random.Random) -> ToolCall:
    return ToolCall("concatenate_train_test", {"train_df": state.roles.get("train", "train"),
                                               "test_df": state.roles.get("test", "test")}, {}, "combined")


def _fill_numeric_call(state: State, rng: random.Random) -> ToolCall:
    combined = _combined(state)
    return ToolCall("fillna_with_median", {"df": combined}, {}, combined)


def _fill_rest_call(state: State, rng: random.Random) -> ToolCall:
    combined = _combined(state)
    cols = _feedback_nan_columns(state)
    if cols and _times_done(state, "fillna_with_mode") >= 1:
        # the mode already filled what it could and the stage still names gaps: drop those columns
        return ToolCall("drop_feature", {"df": combined}, {"column": cols}, combined)
    return ToolCall("fillna_with_mode", {"df": combined}, {}, combined)


def _drop_ids_call(state: State, rng: random.Random) -> ToolCall | None:
    combined = _combined(state)
    present = _columns(state.objects.get(combined, ""))
    cols = [c for c in (state.info.id_column, *NAME_LIKE) if c in present]
    return ToolCall("drop_feature", {"df": combined}, {"column": sorted(set(cols))}, combined) if cols else None


def _is_datetime_column(name: str) -> bool:
    return "datetime" in name.lower() or name.lower() in ("date", "timestamp")


def _datetime_call(state: State, rng: random.Random) -> ToolCall | None:
    combined = _combined(state)
    cols = [c for c in _columns(state.objects.get(combined, "")) if _is_datetime_column(c)]
    if not cols:
        return None
    return ToolCall("extract_datetime_features", {"df": combined}, {"datetime_column": cols[0]}, combined)


def _encode_call(state: State, rng: random.Random) -> ToolCall:
    combined = _combined(state)
    return ToolCall("encode_all_categorical_columns", {"df": combined}, {"method": "label"}, combined)


def _split_call(state: State, rng: random.Random) -> ToolCall:
    return ToolCall("split_combined_into_train_test", {"combined": _combined(state)}, {}, ["train_df", "test_df"])


def _xy_train_call(state: State, rng: random.Random) -> ToolCall:
    return ToolCall("convert_dataframe_to_features_target", {"df": state.roles.get("train_part", "train_df")},
                    {"target_column": state.info.target, "is_train": True}, ["X_train", "y_train"])


def _x_test_call(state: State, rng: random.Random) -> ToolCall:
    return ToolCall("convert_dataframe_to_features_target", {"df": state.roles.get("test_part", "test_df")},
                    {"target_column": state.info.target, "is_train": False}, "X_test")


def _fit_tool(state: State, rng: random.Random) -> str:
    """The fit tool of the drawn model family (or its tune_ tool when only that is offered)."""
    info = state.info
    family = rng.choices(["lightgbm", "xgboost", "random_forest", "linear"], [0.55, 0.2, 0.15, 0.1])[0]
    if info.regression and info.logarithmic:
        # What the prompt's metric tells any data scientist: a logarithmic error needs predictions >= 0.
        # A forest predicts within the training targets' range; boosting and linear models can go
        # below it, which Kaggle rejects (issue 18). The draw above stays, so later draws are unchanged.
        family = "random_forest"
    kind = "regressor" if info.regression else "classifier"
    name = f"fit_{family}_{kind}" if family != "linear" else (
        "fit_linear_regressor" if info.regression else "fit_logistic_regressor")
    tuned = "tune_" + name.removeprefix("fit_")
    if name not in state.offered and tuned in state.offered:
        name = tuned   # the plain fit is not offered, the same model's tuning is: use that
    return name


def _fit_call(state: State, rng: random.Random) -> ToolCall:
    roles = state.roles
    return ToolCall(_fit_tool(state, rng), {"X_train": roles.get("X_train", "X_train"),
                                            "y_train": roles.get("y_train", "y_train")}, {"cv": 3}, "model")


def _predict_call(state: State, rng: random.Random) -> ToolCall:
    kwargs = {"return_probabilities": True} if state.info.probability else {}
    return ToolCall("predict_target", {"model": state.roles.get("model", "model"),
                                       "X_data": state.roles.get("X_test", "X_test")}, kwargs, "predictions")


def _submit_ids_call(state: State, rng: random.Random) -> ToolCall | None:
    if _one_call_submission(state):
        return None
    return ToolCall("get_features", {"df": state.roles.get("test", "test")}, {"columns": [state.info.id_column]},
                    "test_ids")


def _submit_frame_call(state: State, rng: random.Random) -> ToolCall | None:
    if _one_call_submission(state):
        return None
    return ToolCall("convert_to_dataframe", {"data": state.roles.get("preds", "predictions")},
                    {"columns": [state.info.target]}, "prediction_frame")


def _submit_join_call(state: State, rng: random.Random) -> ToolCall | None:
    if _one_call_submission(state):
        return None
    return ToolCall("concatenate_dataframes", {"df1": state.roles.get("ids", "test_ids"),
                                               "df2": state.roles.get("pred_frame", "prediction_frame")},
                    {"axis": 1}, "submission")


def _submit_call(state: State, rng: random.Random) -> ToolCall:
    roles = state.roles
    if _one_call_submission(state):
        return ToolCall("create_submission", {"predictions": roles.get("preds", "predictions"),
                                              "test_df": roles.get("test", "test")}, {})
    return ToolCall("save_dataframe_to_csv", {"df": roles.get("submission", "submission")},
                    {"filepath": state.info.output_path})


_STEP_CALLS: dict[str, CallBuilder] = {
    "load_train": _load_train_call, "load_test": _load_test_call, "inspect": _inspect_call,
    "combine": _combine_call, "fill_numeric": _fill_numeric_call, "fill_rest": _fill_rest_call,
    "drop_ids": _drop_ids_call, "datetime": _datetime_call, "encode": _encode_call, "split": _split_call,
    "xy_train": _xy_train_call, "x_test": _x_test_call, "fit": _fit_call, "predict": _predict_call,
    "submit_ids": _submit_ids_call, "submit_frame": _submit_frame_call, "submit_join": _submit_join_call,
    "submit": _submit_call,
}
assert set(_STEP_CALLS) == set(PIPELINE), "every pipeline step needs its call builder"


# --------------------------------------------------------------------------- the typical mistakes
# The mistakes each step invites besides the generic ones, repeated by how much likelier they are there than a
# generic one (the list is drawn from uniformly). Their order is part of the draw: keep it.
_STEP_MISTAKES: dict[str, list[str]] = {
    "fill_numeric": ["drop_rows"] * 2, "fill_rest": ["drop_rows"] * 2, "encode": ["one_hot"] * 2,
    "xy_train": ["wrong_target", "target_typo"], "predict": ["wrong_frame"] * 2, "submit": ["csv_only"] * 3,
    "submit_frame": ["no_rename"] * 2, "submit_join": ["join_test_frame"] * 2,
}
OUT_OF_ORDER_STEPS = ("combine", "fill_numeric", "encode", "xy_train", "fit")   # steps an agent tends to rush past


def _mistake_kinds(step: str, call: ToolCall | None) -> list[str]:
    """The mistakes that fit ``step`` (whose correct call is ``call``), each as often as it is likely."""
    kinds = ["wrong_name", "kwargs_for_object"] if call is not None and call.bindings else ["bad_path"]
    if step in SKIPPABLE:
        kinds += ["skip"] * 2
    kinds += _STEP_MISTAKES.get(step, [])
    if step in OUT_OF_ORDER_STEPS:
        kinds += ["out_of_order"]
    return kinds


# Each mistake turns the step's correct call into the wrong one: (state, correct call, step, rng) -> call.
Mistake = Callable[[State, ToolCall, str, random.Random], ToolCall]


def _wrong_name(state: State, call: ToolCall, step: str, rng: random.Random) -> ToolCall:
    """An object binding names an object that does not exist."""
    param = rng.choice(sorted(call.bindings))
    wrong = rng.choice(["df", "data", f"{call.bindings[param]}_df", "train_data", "dataset"])
    return ToolCall(call.tool_name, {**call.bindings, param: wrong}, call.func_kwargs, call.output)


def _kwargs_for_object(state: State, call: ToolCall, step: str, rng: random.Random) -> ToolCall:
    """An object passed as a plain value (its name as a string argument) instead of bound."""
    param = rng.choice(sorted(call.bindings))
    rest = {k: v for k, v in call.bindings.items() if k != param}
    return ToolCall(call.tool_name, rest, {**call.func_kwargs, param: call.bindings[param]}, call.output)


def _bad_path(state: State, call: ToolCall, step: str, rng: random.Random) -> ToolCall:
    """A guessed file path: data/<name>_data.csv."""
    name = str(call.func_kwargs.get("filepath", "x")).rsplit("/", 1)[-1]
    return ToolCall(call.tool_name, {}, {"filepath": "data/" + name.replace(".csv", "_data.csv")}, call.output)


def _drop_rows(state: State, call: ToolCall, step: str, rng: random.Random) -> ToolCall:
    """Rows with gaps dropped, on the combined frame: refused where it would drop test rows."""
    return ToolCall("drop_rows_with_missing", {"df": _combined(state)}, {}, _combined(state))


def _one_hot(state: State, call: ToolCall, step: str, rng: random.Random) -> ToolCall:
    return ToolCall("encode_all_categorical_columns", call.bindings, {"method": "one_hot"}, call.output)


def _wrong_target(state: State, call: ToolCall, step: str, rng: random.Random) -> ToolCall:
    """Another column of the train part as the target (the id when none is listed)."""
    listing = state.objects.get(state.roles.get("train_part", ""), "")
    cols = [c for c in _columns(listing) if c != state.info.target]
    wrong = rng.choice(cols) if cols else state.info.id_column
    return ToolCall(call.tool_name, call.bindings, {**call.func_kwargs, "target_column": wrong}, call.output)


def _target_typo(state: State, call: ToolCall, step: str, rng: random.Random) -> ToolCall:
    typo = state.info.target.lower() + "_"
    return ToolCall(call.tool_name, call.bindings, {**call.func_kwargs, "target_column": typo}, call.output)


def _wrong_frame(state: State, call: ToolCall, step: str, rng: random.Random) -> ToolCall:
    """Predicting on the training features."""
    return ToolCall(call.tool_name, {**call.bindings, "X_data": state.roles.get("X_train", "X_train")},
                    call.func_kwargs, call.output)


def _csv_only(state: State, call: ToolCall, step: str, rng: random.Random) -> ToolCall:
    """The bare predictions saved as the submission."""
    return ToolCall("save_dataframe_to_csv", {"df": state.roles.get("preds", "predictions")},
                    {"filepath": state.info.output_path})


def _no_rename(state: State, call: ToolCall, step: str, rng: random.Random) -> ToolCall:
    """The predictions keep the model's name: the target column will be missing."""
    return ToolCall(call.tool_name, call.bindings, {}, call.output)


def _join_test_frame(state: State, call: ToolCall, step: str, rng: random.Random) -> ToolCall:
    """The processed test frame (ids dropped) joined instead of the ids."""
    return ToolCall(call.tool_name, {**call.bindings, "df1": state.roles.get("test_part", "test_df")},
                    call.func_kwargs, call.output)


def _out_of_order(state: State, call: ToolCall, step: str, rng: random.Random) -> ToolCall:
    """The call of a step two to four places later; the correct call when that step is inspect or has nothing
    to do."""
    later = PIPELINE[PIPELINE.index(step) + 2: PIPELINE.index(step) + 5]
    target_step = rng.choice(later) if later else step
    alt = step_call(state, target_step, rng) if target_step not in ("inspect",) else None
    return alt if alt is not None else call


_MISTAKES: dict[str, Mistake] = {
    "wrong_name": _wrong_name, "kwargs_for_object": _kwargs_for_object, "bad_path": _bad_path,
    "drop_rows": _drop_rows, "one_hot": _one_hot, "wrong_target": _wrong_target, "target_typo": _target_typo,
    "wrong_frame": _wrong_frame, "csv_only": _csv_only, "no_rename": _no_rename,
    "join_test_frame": _join_test_frame, "out_of_order": _out_of_order,
}
