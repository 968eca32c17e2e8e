"""Ranking planners across tasks, as the seed papers do: pass@k, medal rates, a Bradley-Terry rating,
a Friedman test with a Wilcoxon-Holm post-hoc and a critical-difference (CD) diagram.

:func:`ranking_markdown` returns the report section and the CD diagram (SVG); the report's ``ranking``
section (sections.py) shows it, in HTML through :func:`mltb_core.analysis.safety.markdown_to_html`. Every figure says what it is computed over.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable

from tabulate import tabulate

from mltb_core.analysis.plots import figure_svg, pyplot
from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.results import counted_records, quality_value
from mltb_core.analysis.tables import entry_label, markdown_label, policy_assumptions
from mltb_core.analysis.stats import (MIN_TASKS_FOR_RATING, MIN_TASKS_FOR_RATING_CI, POSTHOC_TESTS, FriedmanResult,
                                      Rating, bradley_terry_ratings, friedman_test,
                                      outward, pass_at_k, rate_interval, reachable_k)

__all__ = ["task_scores", "task_trials", "medal_rows", "pass_at_k_rows", "cd_diagram_svg", "ranking_markdown",
           "friedman_text", "stage_blocks", "block_task"]

MEDALS = ("gold", "silver", "bronze")


def _cells(records: Iterable[TrialRecord], key: Callable[[TrialRecord], str]) -> dict[str, dict[str, list]]:
    out: dict[str, dict[str, list]] = {}
    for r in counted_records(records):
        out.setdefault(r.task, {}).setdefault(key(r), []).append(r)
    return out


def task_trials(records: Iterable[TrialRecord], key: Callable[[TrialRecord], str]) -> dict[str, dict[str, list[float]]]:
    """Task → entry → its counted trials' normalized scores (:func:`results.quality_value`: a failed trial 0).

    A valid trial without a normalized score is left out; an entry with no value left has no score on
    the task (and takes no part in that task's comparisons).
    """
    out: dict[str, dict[str, list[float]]] = {}
    for task, row in _cells(records, key).items():
        for entry, rs in row.items():
            values = [v for v in map(quality_value, rs) if v is not None]
            if values and any(r.normalized is not None for rr in row.values() for r in rr):
                out.setdefault(task, {})[entry] = values
    return out


def _means(trials: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    return {task: {entry: sum(v) / len(v) for entry, v in row.items()} for task, row in trials.items()}


def task_scores(records: Iterable[TrialRecord], key: Callable[[TrialRecord], str]) -> dict[str, dict[str, float]]:
    """Task → entry → mean over its counted trials of the normalized score (:func:`task_trials`)."""
    return _means(task_trials(records, key))


def pass_at_k_rows(records: Iterable[TrialRecord], key: Callable[[TrialRecord], str]) -> tuple[list[int], list[list]]:
    """The k a cell reaches, and a row per (task, entry): n, c and pass@k for each of those k."""
    cells = sorted(((task, entry, rs) for task, row in _cells(records, key).items() for entry, rs in row.items()),
                   key=lambda cell: cell[:2])
    ks = reachable_k(max((len(rs) for _, _, rs in cells), default=1))
    rows = []
    for task, entry, rs in cells:
        n, c = len(rs), sum(r.valid for r in rs)
        rows.append([task, entry, n, c, *[_fmt(pass_at_k(n, c, k)) for k in ks]])
    return ks, rows


def medal_rows(records: Iterable[TrialRecord], key: Callable[[TrialRecord], str]) -> list[list]:
    """Any-medal and gold rates on tasks graded against a Kaggle board (some trial has a percentile), with the
    interval every table gives a rate (Clopper-Pearson)."""
    rows = []
    for task, row in sorted(_cells(records, key).items()):
        if not any(r.percentile is not None for rs in row.values() for r in rs):
            continue   # no leaderboard: no medals to win
        for entry, rs in sorted(row.items()):
            n = len(rs)
            medal = sum(1 for r in rs if r.medal in MEDALS)
            gold = sum(1 for r in rs if r.medal == "gold")
            rows.append([task, entry, n, f"{medal}/{n} {rate_interval(medal, n).format()}",
                         f"{gold}/{n} {rate_interval(gold, n).format()}"])
    return rows


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _rating_rows(ratings: list[Rating], names: dict[str, str]) -> list[list]:
    return [[names.get(r.player, r.player), f"{r.estimate:+.0f}", _rating_interval(r), f"{r.wins:g}/{r.games}"]
            for r in ratings]


def _rating_interval(rating: Rating) -> str:
    if not rating.has_interval:
        return f"– (k={rating.tasks} < {MIN_TASKS_FOR_RATING_CI} tasks)"
    low = "−∞" if rating.low is None else outward(rating.low, 0, math.floor, signed=True)
    return f"[{low}, {'+∞' if rating.high is None else outward(rating.high, 0, math.ceil, signed=True)}]"


def cd_diagram_svg(result: FriedmanResult, names: dict[str, str] | None = None) -> str | None:
    """Demšar's critical-difference diagram: mean ranks on an axis, groups within the Nemenyi CD joined."""
    if result.critical_difference is None or not result.mean_ranks:
        return None
    plt = pyplot()
    names = names or {}
    k = len(result.planners)
    ordered = sorted(result.mean_ranks.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.32 * k))
    ax.set_xlim(0.6, k + 0.4)
    ax.set_ylim(-(k // 2 + 2.5), 2.2)
    ax.axis("off")
    ax.hlines(0, 1, k, color="black", lw=1)
    for rank in range(1, k + 1):
        ax.vlines(rank, 0, 0.15, color="black", lw=1)
        ax.text(rank, 0.3, str(rank), ha="center", va="bottom", fontsize=9)
    cd = result.critical_difference
    ax.hlines(1.3, 1, 1 + cd, color="firebrick", lw=2)
    ax.text(1 + cd / 2, 1.45, f"CD = {cd:.2f} (Nemenyi, α={result.alpha})", ha="center", va="bottom", fontsize=8)
    half = (k + 1) // 2
    for i, (player, rank) in enumerate(ordered):
        label = f"{names.get(player, player)} ({rank:.2f})"
        left = i < half
        y = -(i + 1) * 0.6 if left else -(k - i) * 0.6
        x_text = 0.65 if left else k + 0.35
        ax.plot([rank, rank, x_text], [0, y, y], color="black", lw=0.8)
        ax.text(x_text, y + 0.05, label, ha="left" if left else "right", va="bottom", fontsize=8)
    # Groups: maximal runs of planners whose mean ranks lie within the CD of each other.
    groups, level = [], 0
    for i in range(k):
        j = i
        while j + 1 < k and ordered[j + 1][1] - ordered[i][1] <= cd:
            j += 1
        if j > i and not any(g[0] <= i and j <= g[1] for g in groups):
            groups.append((i, j))
    for i, j in groups:
        y = -0.25 - 0.18 * level
        ax.hlines(y, ordered[i][1] - 0.03, ordered[j][1] + 0.03, color="steelblue", lw=3)
        level += 1
    return figure_svg(fig)


def friedman_text(result: FriedmanResult, names: dict[str, str], blocks: str = "task(s)",
                  measure: str = "the per-task normalized scores", diagram: bool = False,
                  interim: str | None = None) -> list[str]:
    """The Friedman test and its post-hoc in words. ``blocks`` names what :func:`friedman_test` blocked on (its
    ``tasks``) and ``measure`` what was ranked within each block. ``diagram``: a CD diagram is shown beside the
    text, so Nemenyi's critical difference and the pairs beyond it are named. ``interim``: why no p-value is
    printed (an unfinished run: each partial report is another look at the same question), only mean ranks."""
    n, k = len(result.tasks), len(result.planners)
    if result.statistic is None:
        return [f"Friedman test: not run (needs ≥ 3 planners and ≥ 2 {blocks} where all have a score; have {k} "
                f"and {n})."]
    ranks = ", ".join(f"{names.get(p, p)} {r:.2f}" for p, r in sorted(result.mean_ranks.items(), key=lambda kv: kv[1]))
    if interim is not None:
        return [f"Friedman test over {n} {blocks} × {k} planners on {measure}: withheld, {interim}. Mean ranks "
                f"(1 = best; descriptive only, no test): {ranks}."]
    if result.tied:
        return [f"Friedman test over {n} {blocks} × {k} planners on {measure}: every planner tied in every block, "
                f"so there is no difference to test (p = 1). Mean ranks: {ranks}."]
    if result.permutation_p is not None and result.exact:
        permutation = (f"; exact permutation p = {result.permutation_p:.3g} (every arrangement of the ranks within "
                       "each block enumerated; valid however few the blocks)")
    elif result.permutation_p is None or not result.permutations:
        permutation = ""
    else:
        floor = 1 / (result.permutations + 1)
        if result.permutation_p <= floor * (1 + 1e-9):
            permutation = (f"; permutation p ≤ {floor:.2g} (none of {result.permutations:,} shuffles of the ranks "
                           "within each block reached the observed statistic; valid however few the blocks)")
        else:   # a Monte Carlo p: its standard error says how far another seed's shuffles would move it
            error = math.sqrt(result.permutation_p * (1 - result.permutation_p) / result.permutations)
            permutation = (f"; permutation p ≈ {result.permutation_p:.3g} ({result.permutations:,} shuffles of the "
                           f"ranks within each block, Monte Carlo standard error {error:.1g}; valid however few the "
                           "blocks)")
    sig = result.significant_pairs()
    pairs = "; ".join(f"{names.get(a, a)} vs {names.get(b, b)} (p={result.posthoc[(a, b)]:.3f})" for a, b in sig)
    lines = [f"Friedman test over {n} {blocks} × {k} planners (scipy.stats.friedmanchisquare on {measure}): "
             f"χ² = {result.statistic:.2f}, p = {result.p_value:.3g} (the χ² approximation){permutation}. Mean ranks "
             f"(1 = best): {ranks}."]
    if diagram and result.critical_difference is not None:
        beyond = result.beyond_critical_difference()
        lines[0] += (f" The diagram's Nemenyi critical difference at α = {result.alpha}: "
                     f"{result.critical_difference:.2f}; mean ranks further apart than it: "
                     + ("; ".join(f"{names.get(a, a)} vs {names.get(b, b)}" for a, b in beyond) if beyond else "none")
                     + " (Nemenyi's test compares mean ranks, which depend on every other planner in the table; "
                       "the post-hoc below compares each pair on its own blocks, and the two can disagree).")
    tail = f"pairs differing at α = {result.alpha}: {pairs}." if sig else f"no pair differs at α = {result.alpha}."
    smallest = result.posthoc_floor       # every block where a pair differs in favour of one of them
    adjusted = min(1.0, len(result.posthoc) * smallest)    # the first step of Holm's adjustment
    if not sig and adjusted >= result.alpha:
        tail = (f"no pair can differ at α = {result.alpha} with these {n} {blocks}: the smallest two-sided p a pair "
                f"could reach (all the blocks where it differs in favour of one side) is {smallest:.3g}, "
                f"{adjusted:.3g} after Holm's adjustment over {len(result.posthoc)} pairs.")
    lines.append(f"Post-hoc: {POSTHOC_TESTS[result.posthoc_test]}, Holm-adjusted: {tail}")
    return lines


_BLOCK_TRIAL = " #"   # a stage block's name: "<task> #<trial>"


def stage_blocks(records: Iterable[TrialRecord], key: Callable[[TrialRecord], str]) -> dict[str, dict[str, float]]:
    """The stage each entry reached, per block of one task and one trial index. A trial's seed depends on its
    index alone (``config.trial_seed``), so the entries of a block share the data split and the sampler's seed
    stream: a paired design, for :func:`friedman_test`, whose "tasks" these blocks are."""
    blocks: dict[str, dict[str, float]] = defaultdict(dict)
    for record in counted_records(records):
        blocks[f"{record.task}{_BLOCK_TRIAL}{record.trial}"][key(record)] = float(record.stage_reached)
    return dict(blocks)


def block_task(block: str) -> str:
    """The task of a block of :func:`stage_blocks`."""
    return block.rsplit(_BLOCK_TRIAL, 1)[0]


RATING_NOTE = ("Bradley-Terry rating on the Elo scale (400 points = 10:1 odds; mean 0), fitted to per-task pairwise "
               "outcomes: on each task the planner with the higher mean normalized score wins the pair, equal "
               "scores tie. Interval (approximate, '≈ 95 %'): jackknife over the k tasks with a game (each left out in turn; a task's "
               "means already carry its trials' noise), rating ± t(k−1)·se, simultaneous over the planners "
               "(Bonferroni: each at 1 − 0.05/m for m planners). Measured joint coverage, 8 planners × 3 trials "
               "(docs/statistics.md): 0.94–0.95 at 3 tasks, 0.94–0.97 at 5 and 10; none below "
               f"{MIN_TASKS_FOR_RATING_CI} tasks. A single interval excluding 0 is a finding at that level. "
               "'−∞' ('+∞'): the planner lost (won) every game, so the data set no bound there; its other end is "
               "the wider of the jackknife's and the rating at which it would come last (first) on every task "
               "with the Bonferroni tail's chance (Plackett–Luce). Both ends open: no left-out task moved the "
               "rating, or the planner played no game.")


def ranking_markdown(records: Iterable[TrialRecord], key: Callable[[TrialRecord], str] | None = None, seed: int = 0,
                     names: dict[str, str] | None = None, cd_link: str | None = None,
                     interim: str | None = None) -> tuple[str, str | None]:
    """The ranking section in markdown, and the CD diagram as SVG text (None when it cannot be drawn);
    ``interim``: why the Friedman test's p-values are withheld (:func:`friedman_text`)."""
    records = list(records)
    key = key or entry_label(records)     # labelled over every record, as the tables are
    records = counted_records(records)
    plain = names or {}
    # the Markdown's names escaped (an entry label can hold a model name from a records file); the SVG's as they are
    names = {entry: markdown_label(plain.get(entry, entry)) for entry in set(map(key, records))}
    scores = task_scores(records, key)
    ratings, result = bradley_terry_ratings(scores), friedman_test(scores, seed=seed)
    reached, pass_rows = pass_at_k_rows(records, key)
    for row in pass_rows:
        row[1] = names[row[1]]
    ks = [f"pass@{k}" for k in reached]
    lines = ["## Ranking across tasks", "",
             f"Computed over {len(records)} counted trial(s) on {len(scores)} task(s).", "",
             *[line for model in sorted({r.model for r in records})
               if (note := policy_assumptions(model)) for line in (note + ".", "")],
             "### pass@k", "",
             "Unbiased estimator 1 − C(n−c, k)/C(n, k) over a cell's n counted trials with c valid; '-' where k > n.",
             "", tabulate(pass_rows, headers=["task", "planner", "n", "valid", *ks],
                          tablefmt="github"), ""]
    medals = [[task, names[entry], *rest] for task, entry, *rest in medal_rows(records, key)]
    lines += ["### Medals", ""]
    lines += ([tabulate(medals, headers=["task", "planner", "n", "any medal [95 % CI]", "gold [95 % CI]"],
                        tablefmt="github"), "", "Tasks graded against a bundled Kaggle leaderboard only."]
              if medals else ["No task in these records has a leaderboard, so no medals."])
    rated_tasks = max((r.tasks for r in ratings), default=0)
    lines += ["", "### Rating", ""]
    if not ratings:
        lines += ["No scores to rate."]
    elif rated_tasks < MIN_TASKS_FOR_RATING:
        lines += [f"No rating: the planners played on {rated_tasks} task(s), and a Bradley-Terry rating needs games on "
                  f"at least {MIN_TASKS_FOR_RATING} (from one task it only restates which planner scored higher there; "
                  "the normalized-score table gives that)."]
    else:
        lines += [RATING_NOTE, "", tabulate(_rating_rows(ratings, names),
                                            headers=["planner", "rating", "simultaneous ≈ 95 % CI", "wins/games"],
                                            tablefmt="github")]
    # a PARTIAL report draws no diagram either: its groups are Nemenyi's test at α, read at every round
    figure = cd_diagram_svg(result, plain) if interim is None else None
    shown = figure is not None and cd_link is not None
    lines += ["", "### Friedman test and critical-difference diagram", ""] + friedman_text(result, names, diagram=shown,
                                                                                          interim=interim)
    if shown:
        lines += ["", f"![critical-difference diagram]({cd_link})"]
    return "\n".join(lines), figure
