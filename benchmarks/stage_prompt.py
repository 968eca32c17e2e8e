"""What the local model reads per request along a pipeline: the prompt before and after the stage's
parameter note (``prompts.stage_tools_note``), and how much of each request the next one shares.

    python benchmarks/stage_prompt.py [--task spaceship-titanic] [--tokens] [--json]

Walks the task's expert trajectory (fixtures/experts/<task>.jsonl) through an in-process episode; at the
root and after every call it builds ReAct's proposal request (the full path so far) as the local backend
sends it (``chatml_messages``: tool results as user turns, the catalogue in the first system message),
renders it as the chat text the server evaluates (``prompts.render_chat``) and counts characters and,
with ``--tokens``, tokens of the default model's tokenizer (its vocabulary only is loaded: no model
weights evaluated, nothing generated). "before" is the request without the notes (what mltb sent until
the note was added), "after" with them (since issue 62 each note follows the step where it changed and
stays there), "note chars" the node's own note. "kept" is the share of the request the next request starts
with (what the server's prefix cache can reuse): 100 % since the notes stopped being the request's tail.
No LLM is called.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import Figure, emit, parser as bench_parser  # noqa: E402

import mltb_core.toolkit.tools  # noqa: E402,F401  (registers the tools)
from mltb_core.bench.splits import prepare_split  # noqa: E402
from mltb_core.bench.tasks import get_task  # noqa: E402
from mltb_core.config import TrialConfig  # noqa: E402
from mltb_core.llm import prompts  # noqa: E402
from mltb_core.llm.base import Candidate  # noqa: E402
from mltb_core.llm.local import chatml_messages  # noqa: E402
from mltb_core.llm.sim import SimPolicy  # noqa: E402
from mltb_core.planners.episode import Episode  # noqa: E402
from mltb_core.stages.rewards import StageContext  # noqa: E402
from mltb_core.runner.expert import expert_toolset, load_expert  # noqa: E402
from mltb_core.runner.solve import prepare_agent_data  # noqa: E402
from mltb_core.toolkit.registry import ToolContext  # noqa: E402


def tokenizer():
    """The default local model's tokenizer (vocabulary only), or None when the model is not installed."""
    try:
        import llama_cpp

        from mltb_core.llm.local.models import model_path
        vocab = llama_cpp.Llama(model_path=str(model_path(None)), vocab_only=True, verbose=False)
    except Exception as exc:  # noqa: BLE001 - the token columns are optional
        print(f"(no token counts: {exc})", file=sys.stderr)
        return None
    return lambda text: len(vocab.tokenize(text.encode(), add_bos=False, special=True))


def requests_along_expert(slug: str) -> list[tuple[int, str, str, int]]:
    """(stage reached, rendered request before, after, the node's note's characters) at the root and after
    each expert call."""
    task = get_task(slug)
    split = prepare_split(task, seed=0)
    with tempfile.TemporaryDirectory(prefix="stage-prompt-") as tmp:
        out = Path(tmp)
        data_dir = prepare_agent_data(split, out)
        sandbox = out / "sandbox"
        sandbox.mkdir()
        config = TrialConfig(planner="react", model="local", toolset=expert_toolset(slug))
        episode = Episode.in_process(task, config, SimPolicy(0.7), StageContext.from_agent_data(task, data_dir, 1000),
                                     ToolContext(sandbox=sandbox, data_dir=data_dir, task=task))
        tools = episode.tool_schemas()
        node, rows = episode.root, []
        for call in [None, *load_expert(slug)]:
            if call is not None:
                node = episode.step(node, Candidate("", [call]))
            if node.progress.done:
                break
            before = episode.messages(node, prompts.REACT_SYSTEM)
            after = episode.proposal_messages(node, prompts.REACT_SYSTEM)
            rows.append((node.progress.stage,
                         prompts.render_chat(chatml_messages(before, tools)),
                         prompts.render_chat(chatml_messages(after, tools)),
                         len(episode.stage_tools_note(node))))
        return rows


def stage_notes(slug: str, count) -> list[list]:
    """The note at each of the ten stages (a node that passed the ones before it), on the task's toolset."""
    from mltb_core.stages.masking import stage_tools
    from mltb_core.stages.rewards import REWARD_STAGES
    from mltb_core.toolkit.registry import REGISTRY

    registry = REGISTRY.for_toolset(expert_toolset(slug))
    rows = []
    for stage in REWARD_STAGES:
        note = prompts.stage_tools_note([registry.get(name).schema() for name in stage_tools(stage.name, registry)])
        blocks = [line[2:].split(", ") for line in note.splitlines() if line.startswith("- ")]
        more = note.split(prompts.STAGE_TOOLS_MORE)[1].count(", ") + 1 if prompts.STAGE_TOOLS_MORE in note else 0
        rows.append([f"{stage.number} {stage.name}", len(note), count(note) if count else "-",
                     sum(map(len, blocks)), more])
    return rows


def main(argv=None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--task", default="spaceship-titanic")
    parser.add_argument("--tokens", action="store_true", help="count tokens with the default model's tokenizer")
    args = parser.parse_args(argv)
    count = tokenizer() if args.tokens else None
    rows = requests_along_expert(args.task)
    table = []
    for index, (stage, before, after, note_chars) in enumerate(rows):
        following = rows[index + 1][2] if index + 1 < len(rows) else None
        kept = prompts.shared_prefix_length([after, following]) if following else None
        row = [index, stage, len(before), len(after), note_chars,
               f"{kept / len(after):.1%}" if kept is not None else "-"]
        if count:
            row[4:4] = [count(before), count(after)]
        table.append(row)
    headers = ["call", "stages passed", "chars before", "chars after", "note chars", "kept by the next"]
    if count:
        headers[4:4] = ["tokens before", "tokens after"]
    print(f"{args.task}: ReAct's proposal requests along the expert trajectory, as the local backend renders them")
    print(tabulate(table, headers=headers))
    print()
    print(tabulate(stage_notes(args.task, count), headers=["next stage", "note chars", "note tokens",
                                                           "tools with parameters", "by name only"]))
    notes = [note_chars for *_texts, note_chars in rows]
    figures = [Figure("stage note, characters (max over the path)", f"{max(notes):,}",
                      f"<= {prompts.STAGE_TOOLS_BUDGET:,}", max(notes) <= prompts.STAGE_TOOLS_BUDGET),
               Figure("first request, characters before -> after", f"{len(rows[0][1]):,} -> {len(rows[0][2]):,}")]
    if count:
        figures.append(Figure("first request, tokens before -> after",
                              f"{count(rows[0][1]):,} -> {count(rows[0][2]):,}"))
    emit("The stage's parameter note in the local model's prompt", figures, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
