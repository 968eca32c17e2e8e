"""``mltb compare RUN_A RUN_B``: paired comparison of two runs, task by task, then across tasks.

An *item* is a (task, trial seed) both runs hold for the same arm. Arms are (model, planner) pairs
present in both runs; when the runs share none and each holds exactly one (e.g. ReAct in A, MCTS in
B on the same seeds), those two are compared. Infra errors are left out of the pairs (counted and
shown). When the two sides ran different code (another commit, uncommitted changes:
:func:`mltb_core.analysis.provenance.code_difference`), each side's label names its code, and
:func:`outcome_change` says in words what the outcomes did.

Per task, the change B − A over that task's items:

- validity: paired difference of rates with Newcombe's paired score interval
  (:func:`mltb_core.analysis.stats.paired_proportion_diff_ci`, as the CI gate uses) and McNemar's exact
  test (a two-sided binomial test on the discordant pairs);
- normalized score (every task) and percentile (tasks with a comparable board; failed trials count 0,
  as in the tables; valid trials without a figure are left out): the median of the paired deltas with
  its exact order-statistic interval (none below ``MIN_TRIALS_FOR_MEDIAN_CI`` pairs), computed by the
  gate's own :func:`mltb_core.analysis.compare.paired_median_change` (one estimand for both front ends),
  and the exact sign test (zero deltas dropped), the test that matches that interval;
- stage reached (ordinal, 0-10): the same median of the paired differences and sign test, the outcome that
  moves when few trials are valid.

Every p-value printed is Holm-adjusted: the per-task tests of all rows and columns as one family, the
combined rows as another.

Across tasks, items are never pooled (two tasks × four seeds are two units, not eight): the combined
row is the mean over tasks of the per-task changes (a rate difference, a median delta), tasks weighing
equally, with Student's t interval over the tasks (their spread includes each task's trial noise) and
a task-level sign-flip permutation test (:func:`mltb_core.analysis.stats.cluster_sign_flip`; with k
tasks no p below 2^(1-k)).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from mltb_core.analysis.plots import figure_svg, inline_svg, pyplot
from mltb_core.analysis.compare import paired_median_change
from mltb_core.analysis.provenance import code_difference, trial_code
from mltb_core.analysis.records import Outcome, TrialRecord
from mltb_core.analysis.safety import markdown as markdown_text
from mltb_core.analysis.safety import html as escape_html, terminal_text
from mltb_core.analysis.stats import (CI, MIN_TRIALS_FOR_MEDIAN_CI, NEWCOMBE_MIN_TRIALS, cluster_sign_flip, holm, median_interval,
                                      paired_proportion_diff_ci, sign_test_p, t_interval)
from mltb_core.stages.specs import REWARD_STAGES

__all__ = ["PairedFigures", "CombinedFigures", "ArmComparison", "compare_runs", "render_comparison",
           "comparison_html", "paired_items", "outcome_change"]

QUALITY = ("normalized", "percentile")
# The stage each trial reached (0-10; a valid submission is 10): ordinal, so its test is the sign test. Where
# few trials are valid (a small model), it is the outcome a change moves first.
STAGE = "stage"
MEASURES = (*QUALITY, STAGE)


@dataclass
class PairedFigures:
    """B − A over one task's ``pairs`` items: validity (difference of rates, McNemar) and, per quality metric,
    the median paired delta (sign test)."""
    pairs: int
    valid_a: int
    valid_b: int
    validity_delta: CI
    mcnemar_p: float | None
    deltas: dict[str, list[float]] = field(default_factory=dict)      # metric → paired deltas
    median_delta: dict[str, CI] = field(default_factory=dict)
    sign_p: dict[str, float | None] = field(default_factory=dict)
    holm_p: dict[str, float] = field(default_factory=dict)    # "validity" and metrics: Holm over every row's tests
    unchanged: bool = False      # every pair gave the same validity and the same figures

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "valid_a": self.valid_a, "valid_b": self.valid_b,
                "validity_delta": self.validity_delta.to_dict(), "mcnemar_p": self.mcnemar_p,
                "deltas": self.deltas, "median_delta": {k: v.to_dict() for k, v in self.median_delta.items()},
                "sign_p": self.sign_p, "holm_p": self.holm_p, "unchanged": self.unchanged}


@dataclass
class CombinedFigures:
    """Across tasks: per metric the mean over tasks of the per-task change, t interval over the tasks,
    and the task-level sign-flip p-value; ``tasks`` counts the tasks with a figure per metric."""
    change: dict[str, CI]
    p_value: dict[str, float | None]
    tasks: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"change": {k: v.to_dict() for k, v in self.change.items()}, "p_value": self.p_value,
                "tasks": self.tasks}


@dataclass
class ArmComparison:
    label_a: str
    label_b: str
    overall: CombinedFigures
    per_task: dict[str, PairedFigures]
    only_a: int          # counted items of A without a partner in B
    only_b: int
    infra_left_out: int  # items left out because one side is an infra error
    # which code ran each side's paired trials (provenance.trial_code), when the two differ; else None
    code_a: str | None = None
    code_b: str | None = None

    def side(self, which: str, text: Any = str) -> str:
        """``A = react / sim`` or, when the two sides ran different code, ``A = react / sim on mltb 0.1.0 @ …``:
        the same planner and model on both sides are told apart by their code. ``text`` escapes the labels."""
        label, code = (self.label_a, self.code_a) if which == "A" else (self.label_b, self.code_b)
        return f"{which} = {text(label)}" + (f" on {text(code)}" if code is not None else "")


def _arm_label(arm: tuple[str, str]) -> str:
    return f"{arm[1]} / {arm[0]}"


def _arms(records: list[TrialRecord]) -> dict[tuple[str, str], dict[tuple[str, int], TrialRecord]]:
    """(model, planner) → (task, seed) → record. A run holding one planner under several configurations is a
    ValueError naming them: which of its records would pair with the other run's is not for a comparison to
    guess (one silently replaced the other)."""
    out: dict[tuple[str, str], dict[tuple[str, int], TrialRecord]] = {}
    hashes: dict[tuple[str, str], set[str]] = {}
    for r in records:
        out.setdefault((r.model, r.planner), {})[(r.task, r.seed)] = r
        hashes.setdefault((r.model, r.planner), set()).add(r.config_hash)
    several = {arm: hs for arm, hs in hashes.items() if len(hs) > 1}
    if several:
        raise ValueError("a run holds one planner under several configurations, which a paired comparison cannot "
                         "tell apart: " + "; ".join(f"{_arm_label(arm)}: {', '.join(sorted(hs))}"
                                                     for arm, hs in sorted(several.items()))
                         + " (compare run directories of one configuration each)")
    return out


def paired_items(a: list[TrialRecord], b: list[TrialRecord]) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The (arm of A, arm of B) pairs to compare (see the module docstring); empty when none match."""
    arms_a, arms_b = _arms(a), _arms(b)
    common = sorted(set(arms_a) & set(arms_b))
    if common:
        return [(arm, arm) for arm in common]
    if len(arms_a) == 1 and len(arms_b) == 1:
        return [(next(iter(arms_a)), next(iter(arms_b)))]
    return []


def _binom_p(k: int, n: int) -> float | None:
    if n == 0:
        return None
    from scipy.stats import binomtest

    return float(binomtest(k, n, 0.5).pvalue)


def _figures(pairs: list[tuple[TrialRecord, TrialRecord]]) -> PairedFigures:
    flags = [(ra.valid, rb.valid) for ra, rb in pairs]
    lost = sum(1 for x, y in flags if x and not y)
    gained = sum(1 for x, y in flags if y and not x)
    figures = PairedFigures(pairs=len(pairs), valid_a=sum(x for x, _ in flags), valid_b=sum(y for _, y in flags),
                            validity_delta=paired_proportion_diff_ci(flags), mcnemar_p=_binom_p(gained, gained + lost))
    side_a, side_b = [ra for ra, _ in pairs], [rb for _, rb in pairs]
    for metric in QUALITY:
        change, deltas, excluded = paired_median_change(side_a, side_b, metric)
        if excluded is not None:
            continue
        figures.deltas[metric] = deltas
        figures.median_delta[metric] = change
        figures.sign_p[metric] = sign_test_p(deltas)
    stages = [float(_stage(rb) - _stage(ra)) for ra, rb in pairs]
    if stages:
        figures.deltas[STAGE] = stages
        figures.median_delta[STAGE] = median_interval(stages)
        figures.sign_p[STAGE] = sign_test_p(stages)
    figures.unchanged = bool(pairs) and not lost and not gained and all(
        d == 0 for deltas in figures.deltas.values() for d in deltas)
    return figures


def _stage(record: TrialRecord) -> int:
    """How far a trial got: the stage it reached, and the last stage for a valid submission (a planner that wrote
    one without passing every shaped stage before it still finished)."""
    return len(REWARD_STAGES) if record.valid else record.stage_reached


def _adjust(comparisons: list[ArmComparison]) -> None:
    """Holm over every per-task test printed (McNemar and the sign tests, all arms: they are read together),
    and apart over the combined rows' sign-flip tests. A sign test without a non-zero difference can reject at
    no level (as McNemar's without a discordant pair, which has no p at all): it spends none of the family's α
    (Tarone's argument, given the count of non-zero differences) and keeps its p of 1."""
    raw: dict[tuple, float] = {}
    for i, c in enumerate(comparisons):
        for task, f in c.per_task.items():
            if f.mcnemar_p is not None:
                raw[(i, task, "validity")] = f.mcnemar_p
            for m, p in f.sign_p.items():
                if p is not None and any(f.deltas[m]):
                    raw[(i, task, m)] = p
                elif p is not None:
                    f.holm_p[m] = p
    for (i, task, metric), p in holm(raw).items():
        comparisons[i].per_task[task].holm_p[metric] = p
    overall = {(i, m): p for i, c in enumerate(comparisons) for m, p in c.overall.p_value.items() if p is not None}
    for (i, metric), p in holm(overall).items():
        comparisons[i].overall.p_value[metric] = p


def _combined(per_task: dict[str, PairedFigures], seed: int) -> CombinedFigures:
    changes: dict[str, list[float]] = {"validity": [f.validity_delta.estimate for f in per_task.values()
                                                    if f.validity_delta.estimate is not None]}
    for metric in MEASURES:
        changes[metric] = [f.median_delta[metric].estimate for f in per_task.values()
                           if metric in f.median_delta and f.median_delta[metric].estimate is not None]
    return CombinedFigures({m: t_interval(v) for m, v in changes.items()},
                           {m: cluster_sign_flip(v, seed=seed) for m, v in changes.items()},
                           {m: len(v) for m, v in changes.items()})


def compare_runs(a: list[TrialRecord], b: list[TrialRecord], seed: int = 0) -> list[ArmComparison]:
    """Paired comparisons of runs ``a`` and ``b`` (deduplicated records), one per matched arm."""
    out = []
    arms_a, arms_b = _arms(a), _arms(b)
    for arm_a, arm_b in paired_items(a, b):
        items_a, items_b = arms_a[arm_a], arms_b[arm_b]
        shared = sorted(set(items_a) & set(items_b))
        pairs, infra = [], 0
        for key in shared:
            ra, rb = items_a[key], items_b[key]
            if Outcome.INFRA_ERROR in (ra.outcome, rb.outcome):
                infra += 1
            else:
                pairs.append((ra, rb))
        per_task = {task: _figures([p for p in pairs if p[0].task == task])
                    for task in sorted({p[0].task for p in pairs})}
        counted = lambda items: sum(1 for r in items.values() if r.outcome != Outcome.INFRA_ERROR)  # noqa: E731
        differs = code_difference([ra for ra, _ in pairs], [rb for _, rb in pairs]) is not None
        out.append(ArmComparison(_arm_label(arm_a), _arm_label(arm_b), _combined(per_task, seed), per_task,
                                 only_a=counted({k: v for k, v in items_a.items() if k not in items_b}),
                                 only_b=counted({k: v for k, v in items_b.items() if k not in items_a}),
                                 infra_left_out=infra,
                                 code_a=trial_code(ra for ra, _ in pairs) if differs else None,
                                 code_b=trial_code(rb for _, rb in pairs) if differs else None))
    _adjust(out)
    return out


def outcome_change(comparisons: list[ArmComparison]) -> str:
    """What the trials' outcomes did from A to B, in words, for the line under "they differ in" (a change of code
    or settings is an input; this is what came of it): valid trials per arm over its pairs, and the tasks whose
    pairs changed, e.g. ``react / sim: valid 6/6 → 0/6 over 6 pairs; 3 of 3 tasks changed``."""
    if not comparisons:
        return "no pairs to compare"
    parts = []
    for c in comparisons:
        pairs = sum(f.pairs for f in c.per_task.values())
        valid_a, valid_b = (sum(f.valid_a for f in c.per_task.values()), sum(f.valid_b for f in c.per_task.values()))
        changed = sum(1 for f in c.per_task.values() if not f.unchanged)
        arm = c.label_a if c.label_a == c.label_b else f"{c.label_a} → {c.label_b}"
        what = ("every pair identical" if pairs and not changed
                else f"{changed} of {len(c.per_task)} task(s) changed")
        parts.append(f"{arm}: valid {valid_a}/{pairs} → {valid_b}/{pairs} over {pairs} pair(s); {what}")
    return "; ".join(parts)


def _p(value: float | None) -> str:
    return "n/a" if value is None else (f"{value:.3f}" if value >= 0.001 else "<0.001")


def _median_text(ci: CI | None, digits: int) -> str:
    """The median delta with its interval, or n and '–' when too few pairs give no 95 % interval of a median."""
    if ci is None or ci.estimate is None:
        return "n/a"
    if not ci.has_interval:
        return f"{ci.format(digits)} (n={ci.n} < {MIN_TRIALS_FOR_MEDIAN_CI})"
    return f"{ci.format(digits)} (n={ci.n})"


def _digits(metric: str) -> int:
    return 1 if metric in ("percentile", STAGE) else 2


def _rows(name: str, f: PairedFigures) -> list[str]:
    label = f"{name} (unchanged: every pair identical)" if f.unchanged else name
    row = [label, str(f.pairs), f"{f.valid_a}/{f.pairs} → {f.valid_b}/{f.pairs}", f.validity_delta.format(2),
           _p(f.holm_p.get("validity"))]
    for metric in MEASURES:
        row += [_median_text(f.median_delta.get(metric), _digits(metric)), _p(f.holm_p.get(metric))]
    return row


def _combined_row(c: ArmComparison) -> list[str]:
    o = c.overall
    row = [f"all tasks (mean of per-task changes, k={len(c.per_task)})", "", "",
           f"{o.change['validity'].format(2)} (k={o.tasks['validity']})", _p(o.p_value["validity"])]
    for metric in MEASURES:
        row += [f"{o.change[metric].format(_digits(metric))} (k={o.tasks[metric]})" if o.tasks[metric] else "n/a",
                _p(o.p_value[metric])]
    return row


HEADERS = ["task", "pairs", "valid A → B", "Δ validity B−A [≈ 95% CI]", "Holm p (McNemar exact; all: task sign-flip)",
           "median Δ normalized [95% CI]", "Holm p (sign test; all: sign-flip)", "median Δ percentile [95% CI]",
           "Holm p (sign test; all: sign-flip)", "median Δ stage reached [95% CI]", "Holm p (sign test; all: sign-flip)"]
FOOTNOTE = ("Per task: Newcombe paired score interval (validity; approximate, '≈ 95 %': printed from {pairs} pairs, "
            "where its coverage averaged over true rates is within 1.5 points of 95 % for independent and for "
            "correlated pairs; its least, 0.88, near rates of 0 or 1: docs/statistics.md; fewer pairs print '–' "
            "beside the exact McNemar p); the median of the paired per-trial deltas with "
            "its exact order-statistic interval, none below {min} pairs (normalized score: every task; percentile: "
            "tasks with a comparable board), the same change the regression gate reports, and its exact sign "
            "test. Failed trials count 0. Stage reached (0-10, a valid submission 10): the same median and sign "
            "test over the paired differences of the stage each trial reached; it is ordinal, so the test reads "
            "only which side reached further, and the median says how far, descriptively; its 'all tasks' row "
            "averages those medians like the other measures' rows, a summary, not an ordinal test. 'all tasks': "
            "mean over tasks of the per-task changes, Student's t "
            "interval over the k tasks and a task-level sign-flip permutation p (items are never pooled across "
            "tasks; with k tasks no p below 2^(1-k)). p-values are Holm-adjusted: the per-task tests of every "
            "row and column as one family, the 'all tasks' rows as another; intervals are 95 % per row, not "
            "simultaneous. 'unchanged': every pair gave the same validity and figures (a fact for the seeds "
            "run).").format(min=MIN_TRIALS_FOR_MEDIAN_CI, pairs=NEWCOMBE_MIN_TRIALS["paired"])


def render_comparison(comparisons: list[ArmComparison], fmt: str = "simple") -> str:
    """The comparison as text: ``fmt`` a tabulate format; "github" gives Markdown (labels escaped, the table
    apart from the lines around it)."""
    if not comparisons:
        return "no arm to compare: the runs share no (model, planner) and do not hold one each"
    gap, text = ("\n\n", markdown_text) if fmt == "github" else ("\n", terminal_text)
    blocks = []
    for c in comparisons:
        rows = [_rows(task, f) for task, f in c.per_task.items()] + [_combined_row(c)]
        blocks.append(f"{c.side('A', text)}  vs  {c.side('B', text)}: paired over (task, seed) items in both runs"
                      + gap + tabulate(rows, headers=HEADERS, tablefmt=fmt, disable_numparse=True) + gap
                      + f"left out: {c.only_a} item(s) only in A, {c.only_b} only in B, {c.infra_left_out} with an "
                        "infra error on a side. " + FOOTNOTE)
    return "\n\n".join(blocks)


def _delta_plot(comparisons: list[ArmComparison]) -> str:
    plt = pyplot()

    rows = [(c, task, f) for c in comparisons for task, f in c.per_task.items()]
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * max(len(rows), 1)))
    for y, (_, _, f) in enumerate(rows):
        deltas = f.deltas.get("normalized", [])
        if deltas:
            ax.scatter(deltas, [y] * len(deltas), s=22, alpha=0.6, color="#4477aa")
            ci = f.median_delta["normalized"]
            if ci.has_interval:
                ax.plot([ci.low, ci.high], [y, y], color="#222", lw=2)
            ax.scatter([ci.estimate], [y], marker="D", color="#222", s=30, zorder=3)
    ax.axvline(0, color="#c0392b", lw=1)
    ax.set_yticks(range(len(rows)), [f"{task} · {c.label_b} vs {c.label_a}" for c, task, _ in rows], fontsize=8)
    ax.set_xlabel(f"paired Δ normalized score B − A (dots: items; ◆ median; bar: 95% CI when n ≥ "
                  f"{MIN_TRIALS_FOR_MEDIAN_CI})")
    ax.set_xlim(-1.05, 1.05)
    ax.invert_yaxis()   # rows in the tables' order, top to bottom
    ax.grid(axis="x", alpha=0.3)
    return inline_svg(figure_svg(fig))


def comparison_html(comparisons: list[ArmComparison], run_a: Path, run_b: Path) -> str:
    """The comparison as an HTML fragment (plot and one table per arm)."""
    body = [f"<h2>Run comparison</h2><p>A = {escape_html(str(run_a))}<br>B = {escape_html(str(run_b))}</p>"]
    if not comparisons:
        body.append(f"<p class='note'>{escape_html(render_comparison([]))}</p>")
        return "".join(body)
    body.append(f"<div class='plots'>{_delta_plot(comparisons)}</div>")
    for c in comparisons:
        table = tabulate([_rows(t, f) for t, f in c.per_task.items()] + [_combined_row(c)],
                         headers=HEADERS, tablefmt="html", disable_numparse=True)
        body.append(f"<h3>{c.side('A', escape_html)} vs {c.side('B', escape_html)}</h3>{table}"
                    f"<p class='note'>left out: {c.only_a} item(s) only in A, {c.only_b} only in B, "
                    f"{c.infra_left_out} with an infra error on a side. {escape_html(FOOTNOTE)}</p>")
    return "".join(body)
