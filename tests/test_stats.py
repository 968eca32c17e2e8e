"""stats.py: Wilson and Newcombe intervals against published values, the row bootstrap, clustered CIs, power."""
import math

import numpy as np
import pytest

from mltb_core.bench.grading import row_bootstrap
from mltb_core.analysis.stats import (RateSample, TrialSample, bootstrap_ci, clustered_ci, paired_proportion_diff_ci,
                             powered_half_width, proportion_diff_ci, trials_needed_for_rate_drop,
                             wilson_interval)


@pytest.mark.parametrize("k, n, low, high", [
    (2, 2, 0.3424, 1.0),      # the "2 of 2 valid": not [1.00, 1.00]
    (0, 3, 0.0, 0.5615),
    (5, 10, 0.2366, 0.7634),
    (81, 263, 0.2553, 0.3662),  # Wilson (1927) via Newcombe 1998 single-proportion example
])
def test_wilson_interval_known_values(k, n, low, high):
    ci = wilson_interval(k, n)
    assert ci.estimate == pytest.approx(k / n) and ci.n == n
    assert (ci.low, ci.high) == (pytest.approx(low, abs=1e-4), pytest.approx(high, abs=1e-4))


def test_wilson_interval_rejects_nonsense_and_is_empty_without_trials():
    assert wilson_interval(0, 0).estimate is None
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(4, 3)


@pytest.mark.parametrize("a, m, b, n, low, high", [
    (56, 70, 48, 80, 0.0524, 0.3339),   # Newcombe 1998, Table II example (a), method 10
    (9, 10, 3, 10, 0.1705, 0.8090),     # example (b)
])
def test_newcombe_difference_matches_published_values(a, m, b, n, low, high):
    ci = proportion_diff_ci(a, m, b, n)
    assert (ci.low, ci.high) == (pytest.approx(low, abs=1e-4), pytest.approx(high, abs=1e-4))


def test_paired_difference_uses_the_correlation():
    # 40 paired trials: 30 valid in both runs, 3 lost, 1 gained, 6 failed in both
    pairs = [(True, True)] * 30 + [(True, False)] * 3 + [(False, True)] * 1 + [(False, False)] * 6
    paired = paired_proportion_diff_ci(pairs)
    unpaired = proportion_diff_ci(31, 40, 33, 40)
    assert paired.estimate == pytest.approx(unpaired.estimate) == pytest.approx(-0.05)
    assert paired.high - paired.low < unpaired.high - unpaired.low   # positively correlated pairs: narrower
    assert paired.low < paired.estimate < paired.high


def test_power_formula():
    # n = (1.96 + 0.8416)^2 * 2 p (1 - p) / d^2 at p = 0.5, d = 0.1 → 392.4 → 393
    assert trials_needed_for_rate_drop(0.5, 0.1) == 393
    assert powered_half_width(2.0) == pytest.approx(2.0 * 1.959964 / (1.959964 + 0.841621), rel=1e-5)


def test_row_bootstrap_widens_an_interval_of_identical_trials():
    y_true = np.random.default_rng(0).integers(0, 2, 400)
    y_pred = np.where(np.random.default_rng(1).random(400) < 0.8, y_true, 1 - y_true)
    accuracy = lambda t, p: float(np.mean(t == p))  # noqa: E731
    samples = row_bootstrap(accuracy, y_true, y_pred, seed=3, replicates=50)
    assert samples == row_bootstrap(accuracy, y_true, y_pred, seed=3, replicates=50)   # seeded: pairs across trials
    assert samples != row_bootstrap(accuracy, y_true, y_pred, seed=4, replicates=50)
    assert 0.7 < min(samples) < max(samples) < 0.9
    score = accuracy(y_true, y_pred)
    trials_only = bootstrap_ci([score] * 3, resamples=200)
    with_rows = bootstrap_ci([score] * 3, replicates=[samples] * 3, resamples=200)
    assert trials_only.low == trials_only.high == score
    assert with_rows.low < score < with_rows.high and with_rows.high - with_rows.low > 0.04


def test_row_bootstrap_marks_unscorable_resamples():
    def needs_two_classes(t, p):
        if len(set(t.tolist())) < 2:
            raise ValueError("only one class present")
        return 1.0
    samples = row_bootstrap(needs_two_classes, np.array([0, 0, 0, 1]), np.zeros(4), seed=0, replicates=40)
    assert None in samples and 1.0 in samples
    # a None replicate stands at the trial's own value
    assert TrialSample([0.5], [samples]).replicates.min() == 0.5


def test_trial_sample_rejects_ragged_replicates():
    with pytest.raises(ValueError, match="different numbers of row replicates"):
        TrialSample([1.0, 2.0], [[1.0, 1.0], [2.0]])


def test_clustered_interval_spans_tasks_and_trials():
    rng = np.random.default_rng(5)
    heterogeneous = [TrialSample(rng.normal(mean, 2.0, 6)) for mean in (5, 25, 45, 65, 85, 95)]
    ci = clustered_ci(heterogeneous)
    medians = sorted(float(np.median(s.values)) for s in heterogeneous)
    assert ci.n == 6 and (ci.low, ci.high) == (medians[0], medians[-1])   # 6 tasks: the tasks' min-max range
    five = clustered_ci(heterogeneous[:5])
    assert five.estimate == pytest.approx(45, abs=2) and not five.has_interval   # 5 tasks: no 95 % interval


def test_an_overall_of_all_failed_tasks_holds_its_estimate():
    # the 0/3 bug (an interval that missed its own estimate, 0.00 [0.01, 0.26]) cannot recur: the ends
    # are tasks' figures. Six tasks all measured 0: the median *measured* rate is 0 with >= 97 % (a median above
    # 0 leaves all six at 0 with probability <= 1/64); the tasks' true rates are not what it bounds
    ci = clustered_ci([RateSample(0, 3)] * 6)
    assert ci.estimate == ci.low == ci.high == 0.0
    assert clustered_ci([RateSample(3, 3)] * 6).high == 1.0


def test_paired_median_change_cancels_shared_row_noise():
    from mltb_core.analysis.stats import median_change

    rows = np.linspace(-5, 5, 40)
    base = TrialSample([50.0] * 8, [list(50 + rows)] * 8)
    cur = TrialSample([50.0] * 8, [list(50 + rows)] * 8)
    shared = median_change(cur, base, paired=True)           # replicate b is the same row resample on both sides
    unpaired = median_change(cur, base, paired=False)
    assert shared.low == shared.high == 0.0
    # unpaired: the Mann-Whitney shift interval over the trial values; both runs are graded on the one split,
    # so its rows are not added there either
    assert unpaired.low == unpaired.high == 0.0
    with pytest.raises(ValueError, match="paired samples differ"):
        median_change(TrialSample([1.0]), base, paired=True)


# ---- the seed papers' statistics (issue 12) ---------------------------------------------------------
def test_pass_at_k_matches_enumerating_every_k_subset():
    import itertools
    import math as _math
    from mltb_core.analysis.stats import pass_at_k

    for n in range(1, 8):
        for c in range(n + 1):
            outcomes = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(outcomes, k))
                assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / _math.comb(n, k))
    assert pass_at_k(3, 1, 10) is None
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_bradley_terry_orders_by_pairwise_wins_and_its_interval_holds_the_estimate():
    from mltb_core.analysis.stats import bradley_terry_ratings, pairwise_outcomes

    scores = {f"t{i}": {"a": 0.9, "b": 0.5 + 0.1 * (i % 2), "c": 0.55 - 0.1 * (i % 2)} for i in range(6)}
    assert ("a", "b", 1.0) in pairwise_outcomes({"t": {"a": 1, "b": 0}})
    assert pairwise_outcomes({"t": {"a": 1, "b": 1}}) == [("a", "b", 0.5)]
    ratings = bradley_terry_ratings(scores)
    assert [r.player for r in ratings][0] == "a" and sum(r.estimate for r in ratings) == pytest.approx(0, abs=1e-6)
    for r in ratings:
        assert (r.low is None or r.low <= r.estimate + 1e-3) and r.games == 12   # Elo points
        assert r.high is None or r.estimate <= r.high + 1e-3
    assert ratings[0].high is None      # a wins every game: no upper bound from the data
    b, c = next(r for r in ratings if r.player == "b"), next(r for r in ratings if r.player == "c")
    assert b.wins == c.wins == 3 and b.estimate == pytest.approx(c.estimate, abs=1e-6)   # split 3-3 with each other
    assert b.low < b.estimate < b.high and c.low < c.estimate < c.high


def test_a_sweep_is_bounded_by_the_chance_of_sweeping_not_by_a_zero_spread():
    """a beats b on all 8 tasks. Every left-out task leaves the same 7-0 record, so the jackknife's spread is 0
    and would print [rating, rating]; instead a's upper end is open and its lower end is the rating at which
    a would win all 8 with the Bonferroni tail's chance (2 planners: 0.05 / 2 / 2), the binomial bound."""
    from mltb_core.analysis.stats import bradley_terry_ratings

    scores = {f"t{i}": {"a": 0.6 + 0.01 * i, "b": 0.4} for i in range(8)}
    a, b = bradley_terry_ratings(scores)
    p = 0.0125 ** (1 / 8)                      # P(a wins a game) with P(8 of 8) = 0.0125
    assert a.high is None and b.low is None
    assert a.low == pytest.approx(400 / math.log(10) * math.log(p / (1 - p)) / 2, rel=1e-6)    # mean-0 scale
    assert b.high == pytest.approx(-a.low, rel=1e-6) and 0 < a.low < a.estimate


def test_ratings_no_left_out_task_moves_have_open_ends():
    """The same order a > b > c on every task: no task moves b's rating, so the data show no spread for it."""
    from mltb_core.analysis.stats import bradley_terry_ratings

    scores = {f"t{i}": {"a": 0.9, "b": 0.5, "c": 0.1} for i in range(5)}
    a, b, c = bradley_terry_ratings(scores)
    assert (a.high, c.low) == (None, None) and a.low is not None and c.high is not None
    assert (b.low, b.high) == (None, None) and b.has_interval


def test_tasks_without_a_game_neither_narrow_the_ratings_nor_bound_a_planner_without_games():
    """A task where one planner alone has a score holds no game: it adds no degree of freedom to the
    jackknife, and a planner that played no game has no interval to show (its rating is the regulariser's)."""
    from mltb_core.analysis.stats import bradley_terry_ratings

    base = {"t0": {"a": .9, "b": .5, "c": .1}, "t1": {"a": .1, "b": .9, "c": .5}, "t2": {"a": .9, "b": .1, "c": .5}}
    plain = bradley_terry_ratings(base)
    padded = bradley_terry_ratings({**base, "u0": {"a": .3}, "u1": {"b": .3}, "u2": {"c": .3}})
    assert [(r.player, r.low, r.high, r.tasks) for r in plain] == [(r.player, r.low, r.high, r.tasks) for r in padded]
    assert all(r.tasks == 3 and r.low is not None for r in plain)
    z = next(r for r in bradley_terry_ratings({**base, "u": {"z": 1.0}}) if r.player == "z")
    assert (z.games, z.low, z.high) == (0, None, None)
    assert not any(r.has_interval for r in bradley_terry_ratings({"t0": base["t0"], "t1": base["t1"], "u0": {"a": .3}}))


@pytest.mark.slow
def test_bradley_terry_intervals_are_simultaneous_over_the_planners():
    """8 equal planners (every trial's score drawn alike), 5 tasks x 3 trials: the chance that at least one
    rating interval excludes 0 must stay at the family's 5 % (per-planner 95 % intervals gave 30-38 %)."""
    from mltb_core.analysis.stats import bradley_terry_ratings

    rng = np.random.default_rng(3)
    runs, alarms = 120, 0
    for _ in range(runs):
        trials = {f"t{i}": {f"p{j}": list(rng.random(3)) for j in range(8)} for i in range(5)}
        scores = {t: {p: float(np.mean(v)) for p, v in row.items()} for t, row in trials.items()}
        ratings = bradley_terry_ratings(scores)
        alarms += any(r.low is not None and r.low > 0 or r.high is not None and r.high < 0 for r in ratings)
    assert alarms / runs <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / runs), alarms


def test_a_planner_that_fails_everything_has_an_open_lower_end():
    from mltb_core.analysis.stats import bradley_terry_ratings

    trials = {f"t{i}": {"a": [0.0] * 5, "b": [0.2, 0.5, 0.1, 0.6, 0.3], "c": [0.4, 0.1, 0.7, 0.2, 0.5]}
              for i in range(5)}
    scores = {t: {p: float(np.mean(v)) for p, v in row.items()} for t, row in trials.items()}
    a = next(r for r in bradley_terry_ratings(scores) if r.player == "a")
    assert a.low is None and a.high is not None and a.estimate <= a.high


def test_friedman_permutation_p_is_exact_where_enumeration_is_cheap(monkeypatch):
    """3 blocks × 3 planners, one planner best in every block: the exact p over all 6**3 within-block
    orderings is 42/216, which friedman_test gives (enumerated); the χ² approximation gives half of it. Where
    the arrangements are too many to enumerate, the Monte Carlo p lands within 4 of its standard errors of the
    exact value; an all-tied table gives 1."""
    import itertools

    from mltb_core.analysis import stats as stats_module
    from mltb_core.analysis.ranking import friedman_text
    from mltb_core.analysis.stats import friedman_test

    scores = {"t1": {"a": 3, "b": 2, "c": 1}, "t2": {"a": 3, "b": 1, "c": 2}, "t3": {"a": 3, "b": 2, "c": 1}}
    observed = 3 ** 2 + 7 ** 2 + 8 ** 2            # squared rank sums (a ranks 1, 1, 1; b 2, 3, 2; c 3, 2, 3)
    orders = list(itertools.permutations((1, 2, 3)))
    exact = sum(sum(sum(col) ** 2 for col in zip(*blocks)) >= observed
                for blocks in itertools.product(orders, repeat=3)) / len(orders) ** 3
    assert exact == pytest.approx(42 / 216)
    result = friedman_test(scores)
    assert result.exact and result.permutations == 0 and result.permutation_p == pytest.approx(exact, abs=1e-12)
    assert result.p_value < exact / 1.8                      # the approximation is far off at 3 blocks
    assert "exact permutation p = 0.194 (every arrangement of the ranks within each block enumerated" \
        in friedman_text(result, {})[0]
    ordered = friedman_test({f"t{i}": {"a": 3, "b": 2, "c": 1} for i in range(10)})
    assert ordered.exact and ordered.permutation_p == pytest.approx(6 / 6 ** 10, rel=1e-9)
    tied = friedman_test({t: {"a": 1, "b": 1, "c": 1} for t in ("t1", "t2")})
    assert tied.permutation_p == 1.0 and tied.p_value == 1.0

    monkeypatch.setattr(stats_module, "MAX_EXACT_FRIEDMAN_STATES", 0)     # too many arrangements: sampled
    sampled = friedman_test(scores)
    assert not sampled.exact and sampled.permutations == 20_000
    assert abs(sampled.permutation_p - exact) < 4 * (exact * (1 - exact) / sampled.permutations) ** 0.5
    # p ≈ 0.19 over 20,000 shuffles: standard error sqrt(0.19 · 0.81 / 20,000) ≈ 0.003
    assert (f"permutation p ≈ {sampled.permutation_p:.3g} (20,000 shuffles of the ranks within each block, Monte "
            "Carlo standard error 0.003; valid") in friedman_text(sampled, {})[0]
    ordered = friedman_test({f"t{i}": {"a": 3, "b": 2, "c": 1} for i in range(10)})   # exact p = 6 / 6**10
    assert ordered.permutation_p == 1 / 20_001
    assert ("permutation p ≤ 5e-05 (none of 20,000 shuffles of the ranks within each block reached the observed "
            "statistic; valid however few the blocks)") in friedman_text(ordered, {})[0]


def test_friedman_uses_scipy_and_holm_is_monotone():
    from scipy import stats as ss

    from mltb_core.analysis.stats import friedman_test, holm

    scores = {f"t{i}": {"a": 0.9 - 0.01 * i, "b": 0.5, "c": 0.3 + 0.05 * i} for i in range(8)}
    result = friedman_test(scores)
    table = [[scores[t][p] for t in sorted(scores)] for p in ("a", "b", "c")]
    assert result.p_value == pytest.approx(ss.friedmanchisquare(*table).pvalue)
    assert result.mean_ranks["a"] == 1.0 and result.critical_difference > 0
    adjusted = holm({"x": 0.01, "y": 0.04, "z": 0.03})
    assert adjusted == pytest.approx({"x": 0.03, "z": 0.06, "y": 0.06})
    assert friedman_test({"t": {"a": 1.0, "b": 0.0}}).statistic is None   # 2 planners: ranks only


def test_interval_ends_are_rounded_outward():
    from mltb_core.analysis.stats import CI, rate_interval

    assert rate_interval(0, 1).format() == "0.00 [0.00, 0.98]"        # 0.975: not 0.97, which covers less
    assert rate_interval(1, 1).format() == "1.00 [0.02, 1.00]"        # 0.025: not 0.03
    assert rate_interval(2, 3).format() == "0.67 [0.09, 1.00]"        # 0.9916: up
    assert rate_interval(249, 250).format() == "1.00 [0.97, 1.00]"    # the estimate stays inside the bounds
    assert CI(0.3, 0.3, 0.7, 3).format() == "0.30 [0.30, 0.70]"       # exact decimals stay as they are
    assert CI(-0.1, -0.25, 0.051, 3).format(signed=True) == "-0.10 [-0.25, +0.06]"
    # a non-zero end never prints as 0 (issue 57): it says which side of 0 it lies on, so a REGRESSION's upper
    # bound below 0 prints below 0, and Clopper-Pearson's 1/3 lower bound 0.0084 prints 0.008, not 0.00
    assert rate_interval(1, 3).format() == "0.33 [0.008, 0.91]"
    assert CI(-0.5, -0.7, -0.003, 3).format(signed=True) == "-0.50 [-0.70, -0.003]"
    assert CI(-0.5, -0.7, -0.000001, 3).format(signed=True) == "-0.50 [-0.70, -0.000001]"
    assert CI(-0.5, -0.7, -1e-9, 3).format(signed=True) == "-0.50 [-0.70, +0.00]"   # float noise; never "-0.00"
    assert CI(50.0, 0.04, 99.97, 3).format(1) == "50.0 [0.04, 100.0]"                 # percentiles alike
    assert CI(50.0, 0.0, 99.97, 3).format(1) == "50.0 [0.0, 100.0]"
    assert CI(0.5, None, None, 2).format() == "0.50 [–]" and CI(None, None, None, 0).format() == "n/a"
    with pytest.raises(ValueError, match="finite number, got nan"):
        CI(0.5, float("nan"), 0.9, 3).format()


def test_an_ordinal_measure_gets_the_sign_test_and_too_few_blocks_are_said_to_be_too_few():
    """The stage reached is ordinal: the per-pair post-hoc counts the blocks each planner reached further in
    (exact sign test), never the sizes of the stage differences (Wilcoxon). With 5 blocks no pair can reach
    α after Holm over 3 pairs (0.0625 × 3): the text says no pair *can* differ."""
    from scipy import stats as ss

    from mltb_core.analysis.ranking import friedman_text
    from mltb_core.analysis.stats import friedman_test

    # a ahead of b in 7 of 8 blocks by 1 stage, behind once by 8: the sign test sees 7:1, Wilcoxon the sizes
    scores = {f"t{i}": {"a": 9.0, "b": 8.0, "c": 1.0} for i in range(7)} | {"t7": {"a": 1.0, "b": 9.0, "c": 0.0}}
    ordinal, interval = friedman_test(scores, ordinal=True), friedman_test(scores)
    assert ordinal.posthoc_test == "sign" and interval.posthoc_test == "wilcoxon"
    # Holm: a-c and b-c (8:0, p = 2/256) step down first, so a-b (the largest p) keeps its raw sign-test p
    assert ordinal.posthoc[("a", "b")] == pytest.approx(ss.binomtest(7, 8).pvalue) == pytest.approx(0.0703125)
    assert interval.posthoc[("a", "b")] == pytest.approx(ss.wilcoxon([1.0] * 7 + [-8.0]).pvalue)
    assert interval.posthoc[("a", "b")] > 3 * ordinal.posthoc[("a", "b")]      # the one large loss weighs there
    assert "exact sign test per pair" in friedman_text(ordinal, {})[1]
    assert "Wilcoxon signed-rank per pair" in friedman_text(interval, {})[1]
    few = friedman_test({f"t{i}": {"a": 3.0, "b": 2.0, "c": 1.0} for i in range(5)}, ordinal=True)
    text = friedman_text(few, {}, blocks="blocks")[1]
    assert "no pair can differ at α = 0.05 with these 5 blocks" in text and "is 0.0625, 0.188 after Holm" in text
    assert "Nemenyi" not in " ".join(friedman_text(few, {}))      # no diagram, no critical difference
    # 9 blocks, but no pair differs in more than 4 of them (ties): 2/2**4 = 0.125, 0.375 after Holm over 3 pairs
    rows = [(1, 1, 1)] * 5 + [(1, 3, 9), (1, 9, 9), (1, 6, 9), (1, 9, 6)]
    tied = friedman_test({f"t{i}": dict(zip("abc", map(float, row))) for i, row in enumerate(rows)}, ordinal=True)
    assert tied.posthoc_floor == 0.125
    assert "no pair can differ at α = 0.05 with these 9 blocks: the smallest two-sided p a pair could reach (all " \
           "the blocks where it differs in favour of one side) is 0.125, 0.375" in friedman_text(tied, {}, "blocks")[1]


def test_a_table_of_ties_and_a_test_without_shuffles_say_what_was_not_done():
    from mltb_core.analysis.ranking import friedman_text
    from mltb_core.analysis.stats import friedman_test

    (text,) = friedman_text(friedman_test({f"t{i}": {"a": 1.0, "b": 1.0, "c": 1.0} for i in range(3)}), {})
    assert "every planner tied in every block, so there is no difference to test (p = 1)" in text
    assert "χ²" not in text and "shuffles" not in text
    unshuffled = friedman_text(friedman_test({f"t{i}": {"a": 3.0, "b": 2.0, "c": 1.0} for i in range(3)},
                                             permutations=0), {})[0]
    assert "(the χ² approximation). Mean ranks" in unshuffled and "permutation" not in unshuffled


def test_the_cd_diagram_text_names_the_pairs_beyond_the_critical_difference():
    from mltb_core.analysis.ranking import friedman_text
    from mltb_core.analysis.stats import friedman_test

    result = friedman_test({f"t{i}": {"a": 3.0, "b": 2.0, "c": 1.0} for i in range(10)})
    assert 1.0 < result.critical_difference < 2.0            # mean ranks 1, 2, 3: only a-c lies beyond it
    assert result.beyond_critical_difference() == [("a", "c")]
    text = friedman_text(result, {}, diagram=True)[0]
    assert (f"Nemenyi critical difference at α = 0.05: {result.critical_difference:.2f}; mean ranks further apart "
            "than it: a vs c (") in text
    assert "Nemenyi" not in " ".join(friedman_text(result, {}))     # no diagram beside the text


def test_a_partial_report_withholds_the_p_values():
    from mltb_core.analysis.ranking import friedman_text
    from mltb_core.analysis.stats import friedman_test

    result = friedman_test({f"t{i}": {"a": 3.0, "b": 2.0, "c": 1.0} for i in range(6)})
    lines = friedman_text(result, {}, interim="the run is PARTIAL")
    assert len(lines) == 1 and "withheld, the run is PARTIAL" in lines[0] and "a 1.00, b 2.00, c 3.00" in lines[0]
    assert "p =" not in lines[0] and "permutation" not in lines[0] and "Post-hoc" not in lines[0]


def test_ranking_section_has_pass_at_k_rating_and_a_cd_diagram():
    from mltb_core.analysis.ranking import ranking_markdown
    from mltb_core.analysis.safety import markdown_to_html
    from mltb_core.analysis.records import TrialRecord

    records = []
    for t, task in enumerate(("t1", "t2", "t3")):
        for p, planner in enumerate(("react", "automind", "agent_k")):
            for trial in range(3):
                valid = (trial + p + t) % 3 != 0
                records.append(TrialRecord(task=task, planner=planner, model="sim:0.5", trial=trial, seed=trial,
                                           config_hash="h", outcome="valid" if valid else "planner_failure",
                                           valid=valid, normalized=0.2 * (p + 1) if valid else None,
                                           percentile=40.0 if valid and task == "t1" else None,
                                           medal="bronze" if valid and planner == "agent_k" else None))
    text, figure = ranking_markdown(records, cd_link="cd.svg")
    assert "pass@3" in text and "### Rating" in text and "Friedman test over 3 task(s) × 3 planners" in text
    assert "![critical-difference diagram](cd.svg)" in text and figure.lstrip().startswith("<?xml")
    assert "| t1     | agent_k   |   3 | 2/3" in text            # medals only on the task with a board
    # a medal rate gets the exact interval every other rate gets (Wilson's 2/3 → [0.21, 0.94] is narrower)
    assert "| 2/3 0.67 [0.09, 1.00] " in text and "[0.21, 0.94]" not in text
    interim, no_figure = ranking_markdown(records, cd_link="cd.svg", interim="the run is PARTIAL")
    assert no_figure is None and "critical-difference diagram](" not in interim      # Nemenyi's groups are a test
    assert "withheld, the run is PARTIAL" in interim and "χ²" not in interim
    html = markdown_to_html(text)     # the report's HTML shows the same section (sections.py: ranking)
    assert "<h4>Rating</h4>" in html and "<td>agent_k</td>" in html   # one level under the section
    # entry labels hold model names from a records file: escaped in the Markdown, drawn as text (no mathtext)
    for r in records:
        r.model = "$\\frac{|a}{b$" + "}" * (r.planner == "react") + "<b>|\n# HEAD"
    hostile, figure = ranking_markdown(records, key=lambda r: f"{r.planner} · {r.model}", cd_link="cd.svg")
    assert "<b>" not in hostile and "\n# HEAD" not in hostile and "$\\frac{|a}" not in hostile
    rows = [line for line in hostile.splitlines() if line.startswith("| t1 ")]
    # no cell split: 7 unescaped pipes in a pass@k row (6 columns), 6 in a medal row (5)
    assert sorted(line.replace("\\|", "").count("|") for line in rows) == [6, 6, 6, 7, 7, 7]
    assert "react · \\$\\\\frac\\{\\|a\\}" in hostile
    assert figure.count("frac") == 3      # each label drawn as its characters, not parsed as a formula


def test_ratings_over_too_few_tasks_print_no_interval():
    from mltb_core.analysis.ranking import ranking_markdown
    from mltb_core.analysis.records import TrialRecord

    records = [TrialRecord(task=task, planner=planner, model="sim:0.5", trial=trial, seed=trial, config_hash="h",
                           outcome="valid", valid=True, normalized=0.1 * (p + trial + 1))
               for task in ("t1", "t2") for p, planner in enumerate(("react", "lats")) for trial in range(3)]
    text, _ = ranking_markdown(records)
    assert text.count("– (k=2 < 3 tasks)") == 2 and "[" not in text.split("### Rating")[1].split("###")[0]


def test_a_rate_pooled_over_tasks_counts_tasks_as_the_units():
    from mltb_core.analysis.stats import clustered_rate_interval, rate_interval

    # the case: MCTS-Outcome's 6/9 is 3/3, 3/3, 0/3; pooled Clopper-Pearson read [0.30, 0.93]
    clustered = clustered_rate_interval([(3, 3), (3, 3), (0, 3)])
    assert clustered.estimate == pytest.approx(6 / 9) and clustered.n == 9
    assert clustered.low < 0.01 and clustered.high > 0.99
    # a pooled rate of 0 or 1 has no between-task spread to estimate: its open end counts the 3 tasks, not the 9
    # trials (tasks that are all-or-nothing would otherwise be read as 9 independent draws), never zero width
    with pytest.raises(ValueError, match="successes must be in \\[0, trials\\], got 5 of 3"):
        clustered_rate_interval([(5, 3), (3, 3)])
    with pytest.raises(ValueError, match="got -1 of 3"):
        clustered_rate_interval([(-1, 3), (0, 3)])
    none = clustered_rate_interval([(0, 3)] * 3)
    assert (none.estimate, none.low, none.n) == (0.0, 0.0, 9)
    assert none.high == pytest.approx(rate_interval(0, 3).high) and none.high > rate_interval(0, 9).high
    every = clustered_rate_interval([(3, 3), (2, 2), (1, 1)])
    assert (every.estimate, every.high, every.n) == (1.0, 1.0, 6) and every.low == pytest.approx(rate_interval(3, 3).low)
    # one task: nothing to cluster
    assert clustered_rate_interval([(2, 5)]) == rate_interval(2, 5)
    # tasks that agree still widen it (3 tasks cannot show that they agree), but less than tasks that disagree
    agree = clustered_rate_interval([(2, 3)] * 3)
    assert rate_interval(6, 9).low > agree.low > clustered.low
