"""Search memory: a 200-node MCTS tree versus one trajectory, both grown by the sim policy.

Run: ``python benchmarks/search_memory.py [--nodes 200]``. Each structure is built in its own
process under tracemalloc (numpy buffers included) and kept alive; the figure is the memory it
retains. Path-local scratchpads share unchanged objects with their parents, so a node should
cost about what its own tool call produced: the tree's memory per node should stay near the
trajectory's (target: per-node ratio <= 2), far from one dataframe copy per node.
"""
from __future__ import annotations

import gc
import json
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

from _bench import Figure, count, emit, parser

TASK = "spaceship-titanic"
PER_NODE_RATIO_TARGET = 2.0


def build_episode(planner: str, out: Path, **config):
    """An Episode and planner set up exactly as run_trial does (kept alive for measuring)."""
    from mltb_core.config import TrialConfig
    from mltb_core.llm import make_backend
    from mltb_core.planners import get_planner_class
    from mltb_core.planners.episode import Episode
    from mltb_core.toolkit.registry import ToolContext
    from mltb_core.stages.rewards import StageContext
    from mltb_core.bench.splits import prepare_split
    from mltb_core.bench.tasks import get_task
    from mltb_core.runner.solve import prepare_agent_data
    from mltb_core.toolkit import tools  # noqa: F401 - registers the toolset

    task = get_task(TASK)
    cfg = TrialConfig(planner=planner, model="sim", llm_cache=False).with_(**config)   # fields or planner knobs
    split = prepare_split(task, seed=cfg.seed)
    data_dir = prepare_agent_data(split, out)
    sandbox = out / "sandbox"
    sandbox.mkdir(parents=True, exist_ok=True)
    episode = Episode.in_process(task, cfg, make_backend("sim", seed=cfg.trial_seed), StageContext.from_agent_data(task, data_dir,
                      cfg.max_features), ToolContext(sandbox=sandbox, data_dir=data_dir, task=task, threads=1,
                      seed=cfg.trial_seed, time_limit=cfg.tool_time_limit))
    return episode, get_planner_class(planner)(episode, cfg)


def measure(kind: str, nodes: int) -> dict:
    """Retained bytes of one structure (child-process entry point)."""
    out = Path(tempfile.mkdtemp(prefix="mltb-searchmem-"))
    build_episode("react", out)  # warm imports and caches outside the measurement
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    if kind == "tree":
        episode, planner = build_episode("mcts_shaped", out, expansion_k=3)
        while episode.nodes < nodes:  # one iteration at a time: never stop at a solution
            planner.mcts(episode.root, 1, lambda n: False, depth_limit=12)
            if episode.root.dead:
                break
    else:
        episode, planner = build_episode("react", out, max_depth=40)
        planner.search()
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return {"bytes": retained, "nodes": episode.nodes}


def in_child(kind: str, nodes: int) -> dict:
    code = (f"import sys, json; sys.path.insert(0, {str(Path(__file__).parent)!r}); import search_memory; "
            f"print(json.dumps(search_memory.measure({kind!r}, {nodes})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--nodes", type=count, default=200)
    args = p.parse_args()
    tree, trajectory = in_child("tree", args.nodes), in_child("trajectory", args.nodes)
    per_tree = tree["bytes"] / tree["nodes"]
    per_traj = trajectory["bytes"] / trajectory["nodes"]
    ratio = per_tree / per_traj
    mib = 2**20
    figures = [
        Figure("tree per node / trajectory per node", f"{ratio:.2f}x", f"<= {PER_NODE_RATIO_TARGET:g}x",
               ratio <= PER_NODE_RATIO_TARGET, note="no dataframe copy per node"),
        Figure(f"MCTS tree ({tree['nodes']} nodes)", f"{tree['bytes'] / mib:.1f} MiB",
               note=f"{per_tree / 1024:.0f} KiB per node"),
        Figure(f"one trajectory ({trajectory['nodes']} nodes)", f"{trajectory['bytes'] / mib:.1f} MiB",
               note=f"{per_traj / 1024:.0f} KiB per node"),
        Figure("tree / trajectory (total)", f"{tree['bytes'] / trajectory['bytes']:.1f}x"),
    ]
    emit("Search memory", figures, args.json)


if __name__ == "__main__":
    main()
