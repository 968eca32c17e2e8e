"""Trial configuration: everything that changes a trial's result, hashed for resume and baselines."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from .limits import default_threads
from .registry import DEFAULT_TOOLSET

__all__ = ["TrialConfig", "trial_seed"]


@dataclass(frozen=True)
class TrialConfig:
    planner: str
    model: str
    seed: int = 0                 # the run's base seed; the trial's seed is derived from it
    trial: int = 0
    # search budgets (None = unlimited); a budget hit ends the search cleanly
    max_iterations: int = 40      # MCTS iterations; ReAct steps
    max_depth: int = 40           # tool calls on one path
    expansion_k: int = 3          # candidates proposed per expansion
    exploration: float = 1.0      # UCT exploration weight w
    depth_penalty: float = 0.1    # per-level penalty on node values
    rollout_depth: int = 0        # 0 = the immediate reward (the paper's depth-0 rollouts)
    subtask_depth: int = 6        # hierarchical MCTS: max depth within one subtask
    subtask_iterations: int = 8   # hierarchical MCTS: iterations per subtask and seed node
    max_solutions: int = 3        # hierarchical MCTS: solution nodes carried into the next subtask
    max_llm_calls: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_seconds: float | None = None
    # factorial ablation switches (None = the planner's own default)
    reward_shaping: bool | None = None
    feedback: bool | None = None
    tool_masking: bool | None = None
    decomposition: bool | None = None
    # which tools the model is offered: "paper" (the paper's Table 9 toolset) or "extended" (adds helpers
    # such as create_submission); see registry.TOOLSETS
    toolset: str = DEFAULT_TOOLSET
    # execution
    max_features: int = 1000      # stage 5 bound on the feature count
    llm_cache: bool = True
    threads: int = field(default_factory=default_threads)   # per trial; MLTB_THREADS, default 1
    tool_time_limit: float | None = 300.0
    temperature: float = 0.7

    @property
    def trial_seed(self) -> int:
        return trial_seed(self.seed, self.trial)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown trial config field(s) {unknown}")
        return cls(**data)

    def with_(self, **changes: Any) -> TrialConfig:
        return replace(self, **changes)

    def config_hash(self) -> str:
        """Hash of the knobs shared by all trials of a configuration (not planner/model/trial/cache)."""
        data = {k: v for k, v in self.to_dict().items()
                if k not in ("planner", "model", "trial", "llm_cache", "threads")}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def trial_seed(base_seed: int, trial: int) -> int:
    """Independent, reproducible seed for trial ``trial`` of a run seeded ``base_seed``."""
    digest = hashlib.sha256(f"{base_seed}:{trial}".encode()).digest()
    return int.from_bytes(digest[:4], "little")
