"""stats.py: Wilson and Newcombe intervals against published values, the row bootstrap, clustered CIs, power."""
import numpy as np
import pytest

from mltb_core.bench.grading import row_bootstrap
from mltb_core.analysis.stats import (RateSample, TrialSample, bootstrap_ci, clustered_ci, diff_ci, paired_proportion_diff_ci,
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


def test_clustered_interval_resamples_tasks():
    rng = np.random.default_rng(5)
    heterogeneous = [TrialSample(rng.normal(mean, 2.0, 6)) for mean in (5, 25, 45, 65, 85)]
    with_tasks = clustered_ci(heterogeneous, resamples=500)
    tasks_fixed = clustered_ci(heterogeneous, resample_groups=False, resamples=500)
    assert with_tasks.estimate == tasks_fixed.estimate and with_tasks.n == 5
    assert with_tasks.high - with_tasks.low > 3 * (tasks_fixed.high - tasks_fixed.low)


def test_clustered_rate_of_one_all_valid_task_is_not_certain():
    ci = clustered_ci([RateSample(2, 2)], resamples=1000)
    assert ci.estimate == 1.0 and 0.2 < ci.low < 0.5


def test_paired_diff_cancels_shared_row_noise():
    rows = np.linspace(-5, 5, 40)
    base = TrialSample([50.0] * 6, [list(50 + rows)] * 6)
    cur = TrialSample([50.0] * 6, [list(50 + rows)] * 6)
    shared = diff_ci(cur, base, paired=True, shared_rows=True, resamples=300)
    independent = diff_ci(cur, base, paired=True, shared_rows=False, resamples=300)
    assert shared.low == shared.high == 0.0
    assert independent.high - independent.low > 4
    with pytest.raises(ValueError, match="paired samples differ"):
        diff_ci(TrialSample([1.0]), base, paired=True, shared_rows=False)
