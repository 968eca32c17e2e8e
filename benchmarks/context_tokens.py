"""Input tokens per trial with ``--context full`` and ``trimmed``, and the prompt prefix the planners share.

    python benchmarks/context_tokens.py [--tasks spaceship-titanic,playground-series-s4e1]
                                        [--planners react,mcts_shaped] [--seeds 3] [--skill 0.7] [--json]

Part 1 runs every (task, planner, context, trial) with ``sim:<skill>`` (a synthetic policy, NOT an LLM; it
counts tokens as characters / 4 of the request: messages and tool schemas) and the default budgets, and
prints input tokens per trial and per LLM call, with how many trials reached a valid submission (the
sim's path, hence its call count, changes with what it is shown).

Part 2 builds the first request of every planner on the first task, for two trials, renders each as the
chat text a server sees (``prompts.render_chat``) and prints the longest prefix all of them share, next
to where the shared preamble (task description and tool catalogue) ends. No LLM is called in part 2.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import Figure, count, emit, parser as bench_parser  # noqa: E402

import mltb_core.toolkit.tools  # noqa: E402,F401  (registers the tools)
from mltb_core.bench.splits import prepare_split  # noqa: E402
from mltb_core.bench.tasks import get_task  # noqa: E402
from mltb_core.config import CONTEXT_MODES, TrialConfig  # noqa: E402
from mltb_core.llm import prompts  # noqa: E402
from mltb_core.llm.sim import SimPolicy  # noqa: E402
from mltb_core.planners import PLANNERS  # noqa: E402
from mltb_core.planners.episode import Episode  # noqa: E402
from mltb_core.stages.rewards import StageContext  # noqa: E402
from mltb_core.runner.solve import prepare_agent_data  # noqa: E402
from mltb_core.runner.trial import run_trial  # noqa: E402
from mltb_core.toolkit.registry import ToolContext  # noqa: E402

DEFAULT_TASKS = "spaceship-titanic,playground-series-s4e1"
# Tool calls that run away (a sim mistake such as a 6,000-class target) would dominate the wall time
# without changing the token count much; the token figures are per trial as the trial ran.
TOOL_TIME_LIMIT = 60.0


class FirstRequest(SimPolicy):
    """The sim, recording every request it answers (the benchmark keeps the first)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests: list[tuple[list[dict], list[dict]]] = []

    def _generate(self, messages, tools, n, temperature, seed):
        self.requests.append((messages, tools))
        return super()._generate(messages, tools, n, temperature, seed)


def first_request(task, planner: str, trial: int, out: Path, context: str = "full") -> tuple[str, str]:
    """(rendered first request, rendered shared preamble) of ``planner`` in a fresh episode of trial ``trial``."""
    split = prepare_split(task, seed=0)
    data_dir = prepare_agent_data(split, out)
    sandbox = out / "sandboxes" / f"{task.slug}-{planner}-t{trial:02d}"
    sandbox.mkdir(parents=True, exist_ok=True)
    config = TrialConfig(planner=planner, model="sim:0.7", trial=trial, max_llm_calls=1, context=context)
    llm = FirstRequest(0.7, seed=config.trial_seed)
    episode = Episode.in_process(task, config, llm, StageContext.from_agent_data(task, data_dir, config.max_features),
                      ToolContext(sandbox=sandbox, data_dir=data_dir, task=task))
    planner_cls = PLANNERS[planner]
    planner_cls(episode, config).run()
    messages, _tools = llm.requests[0]
    return prompts.render_chat(messages), prompts.render_chat(messages[:1])


def shared_prefix_figures(task_slug: str, planners: list[str]) -> tuple[list[list], dict]:
    task = get_task(task_slug)
    with tempfile.TemporaryDirectory(prefix="context-prefix-") as tmp:
        rendered = {(p, t): first_request(task, p, t, Path(tmp)) for p in planners for t in (0, 1)}
    texts = [r[0] for r in rendered.values()]
    preamble_end = len(rendered[(planners[0], 0)][1])
    shared = prompts.shared_prefix_length(texts)
    rows = [[p, t, len(text), shared] for (p, t), (text, _) in rendered.items()]
    return rows, {"shared_chars": shared, "preamble_chars": preamble_end, "requests": len(texts),
                  "min_request_chars": min(len(t) for t in texts)}


def run_trials(tasks: list[str], planners: list[str], seeds: int, skill: float) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory(prefix="context-tokens-") as tmp:
        for slug in tasks:
            task = get_task(slug)
            split = prepare_split(task, seed=0)
            for planner in planners:
                for context in CONTEXT_MODES:
                    for trial in range(seeds):
                        config = TrialConfig(planner=planner, model=f"sim:{skill:g}", trial=trial, context=context,
                                             llm_cache=False, tool_time_limit=TOOL_TIME_LIMIT)
                        start = time.monotonic()
                        record = run_trial(task, config, Path(tmp) / f"{slug}-{planner}-{context}", split=split)
                        out.append({"task": slug, "planner": planner, "context": context, "trial": trial,
                                    "tokens_in": record.tokens_in, "calls": record.llm_calls, "valid": record.valid,
                                    "outcome": record.outcome, "seconds": time.monotonic() - start})
                        print(f"  {slug} {planner} {context} t{trial}: {record.tokens_in} tokens in, "
                              f"{record.llm_calls} calls, {record.outcome}", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__.split("\n")[0])
    parser.add_argument("--tasks", default=DEFAULT_TASKS)
    parser.add_argument("--planners", default="react,mcts_shaped")
    parser.add_argument("--prefix-planners", default="react,mcts_shaped,mcts_outcome,lats,hierarchical_mcts")
    parser.add_argument("--seeds", type=count, default=3)
    parser.add_argument("--skill", type=float, default=0.7)
    args = parser.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    planners = [p for p in args.planners.split(",") if p]

    rows, prefix = shared_prefix_figures(tasks[0], [p for p in args.prefix_planners.split(",") if p])
    print(f"Shared prefix of the first request of each planner, trials 0 and 1, on {tasks[0]} "
          f"(rendered chat text, characters; ~4 characters per token):")
    print(tabulate(rows, headers=["planner", "trial", "request chars", "shared prefix chars"]))
    print(f"shared by all {prefix['requests']} requests: {prefix['shared_chars']} chars "
          f"(~{prefix['shared_chars'] // 4} tokens); the shared preamble ends at {prefix['preamble_chars']} chars\n")

    results = run_trials(tasks, planners, args.seeds, args.skill)
    table = []
    figures = [Figure("shared prefix of the first requests (chars)", f"{prefix['shared_chars']:,}",
                      target=f">= end of the shared preamble ({prefix['preamble_chars']:,})",
                      met=prefix["shared_chars"] >= prefix["preamble_chars"],
                      note=f"{prefix['requests']} requests: {args.prefix_planners.replace(',', ', ')} x trials 0, 1 "
                           f"on {tasks[0]}; ~{prefix['shared_chars'] // 4:,} tokens; shortest request "
                           f"{prefix['min_request_chars']:,} chars")]
    for slug in tasks:
        for planner in planners:
            per = {}
            for context in CONTEXT_MODES:
                cell = [r for r in results if (r["task"], r["planner"], r["context"]) == (slug, planner, context)]
                tokens = [r["tokens_in"] for r in cell]
                calls = sum(r["calls"] for r in cell)
                per[context] = statistics.mean(tokens)
                figures.append(Figure(f"{slug} {planner} {context}: input tokens per trial",
                                      f"{statistics.mean(tokens):,.0f}",
                                      note=f"n={len(cell)} trials, range {min(tokens):,}-{max(tokens):,}; "
                                           f"{sum(tokens) / max(calls, 1):,.0f} per call, "
                                           f"{calls / len(cell):.1f} calls per trial, "
                                           f"{sum(r['valid'] for r in cell)}/{len(cell)} valid"))
                table.append([slug, planner, context, len(cell), f"{statistics.mean(tokens):,.0f}",
                              f"{min(tokens):,}-{max(tokens):,}", f"{sum(tokens) / max(calls, 1):,.0f}",
                              f"{calls / len(cell):.1f}", f"{sum(r['valid'] for r in cell)}/{len(cell)}",
                              f"{statistics.mean(r['seconds'] for r in cell):.0f}"])
            figures.append(Figure(f"{slug} {planner}: input tokens per trial, trimmed / full",
                                  f"{per['trimmed'] / per['full']:.2f}",
                                  note="ratio of the means; the sim's path length differs between the two"))
    print(f"Input tokens per trial, sim:{args.skill:g} (synthetic policy, NOT an LLM), default budgets, "
          f"{args.seeds} trials per cell:")
    print(tabulate(table, headers=["task", "planner", "context", "n", "tokens in / trial (mean)", "range",
                                   "tokens in / call", "calls / trial", "valid", "wall s / trial"]))
    emit("Input tokens per trial: full vs trimmed context", figures, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
