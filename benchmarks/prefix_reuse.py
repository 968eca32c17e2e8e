"""What a prefix cache must evaluate per call, with the stage note at the end of every request (the layout
up to issue 62) and after the step where it changed (the layout since): a replay of recorded trajectories.

    python benchmarks/prefix_reuse.py [--runs reports/local-llm] [--planners react,mcts_shaped]
                                      [--tasks spaceship-titanic,...] [--trials N] [--json]

For each recorded real-LLM trajectory of the planners (``<run>/trajectories/*/*.jsonl``), the recorded tree
is rebuilt in an in-process episode: every recorded tool call is executed again, below its recorded parent,
on the trial's split, with the current code's tools (so observations are today's, not byte for byte the
recorded ones). At every recorded proposal call, the request from that node is built under both layouts,
rendered as the embedded server evaluates it (``chatml_messages``, the ChatML template, the assistant turn
opened) and tokenized with the embedded model's tokenizer (vocabulary only; nothing is generated). The
tokens of a request that a prefix cache must evaluate are those after its longest common prefix with

- ``path``: the latest earlier request from the same node or an ancestor (the request it extends), and
- ``order``: the request just before it (one KV cache holding the last request, as the embedded server).

For ReAct both are the same. The recorded uncached prompt tokens (``prompt_tokens - cached_input_tokens``
of the records) are shown next to them. A request asked for several candidates (MCTS-Shaped's three) is
one request here: the repeats of one prompt are cached under both layouts. No LLM is called: this is a
replay of the same trajectories under two layouts, not new trials (what the model would do with the new
layout is not measured).
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import ROOT, Figure, emit, parser as bench_parser  # noqa: E402

import mltb_core.toolkit.tools  # noqa: E402,F401  (registers the tools)
from mltb_core.bench.splits import prepare_split  # noqa: E402
from mltb_core.bench.tasks import get_task  # noqa: E402
from mltb_core.config import TrialConfig  # noqa: E402
from mltb_core.llm import prompts  # noqa: E402
from mltb_core.llm.base import Candidate  # noqa: E402
from mltb_core.llm.local import chatml_messages  # noqa: E402
from mltb_core.llm.sim import SimPolicy  # noqa: E402
from mltb_core.planners.episode import Episode  # noqa: E402
from mltb_core.planners.trajectory import read_trajectory  # noqa: E402
from mltb_core.planners.tree import Node, path_to  # noqa: E402
from mltb_core.runner.solve import prepare_agent_data  # noqa: E402
from mltb_core.stages.rewards import StageContext  # noqa: E402
from mltb_core.toolkit.registry import ToolCall, ToolContext  # noqa: E402

# The planners whose proposal requests this replays, and their instructions (the second system message).
SYSTEMS = {"react": prompts.REACT_SYSTEM, "mcts_shaped": prompts.EXPANSION_SYSTEM,
           "mcts_outcome": prompts.EXPANSION_SYSTEM}
LAYOUTS = ("old", "new")
ASSISTANT_OPEN = "<|im_start|>assistant\n"   # the generation prompt the chat template adds


@dataclass
class Request:
    node: int
    ancestors: frozenset[int]
    tokens: dict[str, np.ndarray] = field(default_factory=dict)
    recorded_uncached: int = 0
    recorded_prompt: int = 0
    messages: list[dict] = field(default_factory=list)   # the new layout's request


@dataclass
class TrialReplay:
    name: str
    planner: str
    requests: list[Request]
    seconds: float

    def uncached(self, layout: str, against: str) -> int:
        total = 0
        for index, request in enumerate(self.requests):
            tokens = request.tokens[layout]
            earlier = self.requests[:index]
            if against == "order":
                previous = earlier[-1] if earlier else None
            else:
                previous = next((r for r in reversed(earlier) if r.node in request.ancestors), None)
            shared = common_prefix(tokens, previous.tokens[layout]) if previous is not None else 0
            total += len(tokens) - shared
        return total

    def new_parts(self, count) -> dict[str, int]:
        """What the new layout's requests add over the request each extends (path), by part, in tokens of the
        messages' texts: the stage notes, the tool results' scratchpad listings, the rest of the tool results,
        the assistant's calls, the rest (a first request: everything)."""
        parts = dict.fromkeys(PARTS, 0)
        for index, request in enumerate(self.requests):
            previous = next((r for r in reversed(self.requests[:index]) if r.node in request.ancestors), None)
            start = 0
            if previous is not None:
                pairs = zip(request.messages, previous.messages)
                start = next((i for i, (a, b) in enumerate(pairs) if a != b), len(previous.messages))
            for message in request.messages[start:]:
                for part, text in _parts(message):
                    parts[part] += len(count(text))
        return parts

    def context(self, layout: str) -> float:
        return statistics.fmean(len(r.tokens[layout]) for r in self.requests)


PARTS = ("stage notes", "result listings", "results (rest)", "calls", "other")


def _parts(message: dict) -> list[tuple[str, str]]:
    content = message.get("content") or ""
    if prompts.is_stage_tools_note(message):
        return [("stage notes", content)]
    if message["role"] == "tool":
        paragraphs = content.split("\n\n")
        listing = [p for p in paragraphs if p.startswith(prompts.SCRATCHPAD_HEADER)]
        rest = [p for p in paragraphs if not p.startswith(prompts.SCRATCHPAD_HEADER)]
        return [("result listings", "\n\n".join(listing)), ("results (rest)", "\n\n".join(rest))]
    if message["role"] == "assistant":
        calls = [c["function"]["name"] + c["function"]["arguments"] for c in message.get("tool_calls") or []]
        return [("calls", content + "".join(calls))]
    return [("other", content)]


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def tokenizer():
    """The embedded default model's tokenizer (vocabulary only)."""
    import llama_cpp

    from mltb_core.llm.local.models import model_path
    vocab = llama_cpp.Llama(model_path=str(model_path(None)), vocab_only=True, verbose=False)
    return lambda text: np.asarray(vocab.tokenize(text.encode(), add_bos=False, special=True), dtype=np.int64)


def old_layout(episode: Episode, node: Node, system: str) -> list[dict]:
    """The request as mltb built it until issue 62: the path without notes, then the node's note last."""
    note = episode.stage_tools_note(node)
    return episode.messages(node, system) + ([{"role": "user", "content": note}] if note else [])


def render(messages: list[dict], tools: list[dict]) -> str:
    return prompts.render_chat(chatml_messages(messages, tools)) + ASSISTANT_OPEN


def replay(path: Path, count, out: Path) -> TrialReplay | None:
    events = list(read_trajectory(path))
    start = events[0]
    planner = start["config"]["planner"]
    if start.get("step_type") != "trial_start" or planner not in SYSTEMS:
        return None
    began = time.monotonic()
    recorded = start["config"]
    task = get_task(start["task"])
    config = TrialConfig(planner=planner, model="local", seed=recorded["seed"], trial=recorded["trial"],
                         toolset=recorded["toolset"], context=recorded["context"],
                         max_features=recorded["max_features"])
    split = prepare_split(task, seed=config.seed)
    data_dir = prepare_agent_data(split, out)
    sandbox = out / "sandboxes" / path.stem
    sandbox.mkdir(parents=True, exist_ok=True)
    episode = Episode.in_process(task, config, SimPolicy(0.7), StageContext.from_agent_data(task, data_dir, config.max_features),
                                 ToolContext(sandbox=sandbox, data_dir=data_dir, task=task),
                                 feedback=bool(start.get("feedback", True)))
    system, tools = SYSTEMS[planner], episode.tool_schemas()
    nodes: dict[int, Node] = {0: episode.root}
    pending: dict[int, list[dict]] = {}   # parent id -> the candidates of its latest proposal not yet run
    requests: list[Request] = []
    for event in events[1:]:
        kind = event.get("step_type")
        if kind == "llm_call" and event.get("purpose") == "propose":
            node = nodes[event["node_id"]]
            request = Request(node.id, frozenset(n.id for n in path_to(node)))
            for layout, messages in (("old", old_layout(episode, node, system)),
                                     ("new", episode.proposal_messages(node, system))):
                request.tokens[layout] = count(render(messages, tools))
            request.messages = messages
            usage = event.get("usage", {})
            request.recorded_prompt = int(usage.get("prompt_tokens", 0))
            request.recorded_uncached = request.recorded_prompt - int(usage.get("cached_input_tokens", 0))
            requests.append(request)
            pending[node.id] = list(event.get("candidates", []))
        elif kind in ("tool_execution_initiation", "invalid_reply"):
            parent = nodes[event["parent_id"]]
            queue = pending.get(parent.id, [])
            text = queue.pop(0).get("text", "") if queue else ""
            calls = [ToolCall.from_dict({"tool_name": c["tool_name"], "tool_args": c["tool_args"]})
                     for c in event.get("tools_to_execute", [])[:1]]
            child = episode.step(parent, Candidate(text, calls))
            if kind == "invalid_reply":
                child.observation = str(event.get("content_preview") or child.observation)
            nodes[event["node_id"]] = child
    return TrialReplay(path.stem, planner, requests, time.monotonic() - began)


def trajectory_files(runs: list[Path], planners: set[str], tasks: set[str] | None) -> list[Path]:
    files = []
    for run in runs:
        for path in sorted(run.glob("trajectories/*/*.jsonl"), key=lambda p: p.name):
            if any(f"-{p}-" in path.name for p in planners) and (
                    tasks is None or any(path.name.startswith(f"{t}-") for t in tasks)):
                files.append(path)
    return files


def main(argv=None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--runs", default="reports/local-llm", help="run directories, comma-separated")
    parser.add_argument("--planners", default="react,mcts_shaped")
    parser.add_argument("--tasks", default=None, help="only these tasks' trajectories, comma-separated")
    parser.add_argument("--trials", type=int, default=None, help="at most this many trajectories per planner")
    args = parser.parse_args(argv)
    planners = [p for p in args.planners.split(",") if p]
    runs = [Path(r) if Path(r).is_absolute() else ROOT / r for r in args.runs.split(",")]
    count = tokenizer()
    replays: dict[str, list[TrialReplay]] = {p: [] for p in planners}
    with tempfile.TemporaryDirectory(prefix="prefix-reuse-") as tmp:
        for path in trajectory_files(runs, set(planners), set(args.tasks.split(",")) if args.tasks else None):
            planner = next(p for p in planners if f"-{p}-" in path.name)
            if args.trials is not None and len(replays[planner]) >= args.trials:
                continue
            trial = replay(path, count, Path(tmp))
            if trial is not None:
                replays[planner].append(trial)
                print(f"  {trial.name}: {len(trial.requests)} requests, "
                      f"uncached old {trial.uncached('old', 'path'):,} -> new {trial.uncached('new', 'path'):,} "
                      f"({trial.seconds:.0f} s)", file=sys.stderr)
    table, figures = [], []
    for planner, trials in replays.items():
        if not trials:
            continue

        def mean(values) -> float:
            return statistics.fmean(values)
        old_path, new_path = (mean(t.uncached(layout, "path") for t in trials) for layout in LAYOUTS)
        old_order, new_order = (mean(t.uncached(layout, "order") for t in trials) for layout in LAYOUTS)
        recorded = mean(sum(r.recorded_uncached for r in t.requests) for t in trials)
        calls = mean(len(t.requests) for t in trials)
        old_context, new_context = (mean(t.context(layout) for t in trials) for layout in LAYOUTS)
        table.append([planner, len(trials), f"{calls:.0f}", f"{recorded:,.0f}", f"{old_path:,.0f}",
                      f"{new_path:,.0f}", f"{new_path / old_path:.0%}", f"{old_order:,.0f}", f"{new_order:,.0f}",
                      f"{new_order / old_order:.0%}", f"{old_context:,.0f}", f"{new_context:,.0f}"])
        figures.append(Figure(f"{planner}: uncached prompt tokens per trial along the path, old -> new",
                              f"{old_path:,.0f} -> {new_path:,.0f} ({new_path / old_path:.0%})",
                              "<= 50 %", new_path <= 0.5 * old_path))
        figures.append(Figure(f"{planner}: uncached prompt tokens per trial, one KV cache in call order",
                              f"{old_order:,.0f} -> {new_order:,.0f} ({new_order / old_order:.0%})",
                              "<= 50 %", new_order <= 0.5 * old_order))
        figures.append(Figure(f"{planner}: mean request tokens (context), old -> new",
                              f"{old_context:,.0f} -> {new_context:,.0f}"))
    parts_table = []
    for planner, trials in replays.items():
        if trials:
            totals = [t.new_parts(count) for t in trials]
            mean_parts = {part: statistics.fmean(p[part] for p in totals) for part in PARTS}
            whole = sum(mean_parts.values()) or 1
            parts_table.append([planner] + [f"{mean_parts[p]:,.0f} ({mean_parts[p] / whole:.0%})" for p in PARTS])
    print("What the new layout's requests add over the request each extends (tokens of the texts, mean per "
          "trial)")
    print(tabulate(parts_table, headers=["planner", *PARTS]))
    print("Uncached prompt tokens per trial (mean over trials): a replay of the recorded trajectories under the "
          "note-at-the-end layout (old) and the note-after-its-step layout (new); not new trials")
    print(tabulate(table, headers=["planner", "trials", "requests", "recorded uncached", "old (path)", "new (path)",
                                   "new/old", "old (order)", "new (order)", "new/old", "old context",
                                   "new context"]))
    emit("Prefix reuse: the stage note's placement, replayed on recorded trajectories", figures, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
