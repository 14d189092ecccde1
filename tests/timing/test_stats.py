"""Statistics: exact ranks, CI coverage on known distributions, summaries, flags, comparison."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from solbench.timing import stats
from solbench.timing.stats import (
    compare_medians,
    median_ci,
    median_ci_ranks,
    rel_ci_halfwidth,
    summarize,
)


def _binom_cdf_half(n: int, k: int) -> float:
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


@pytest.mark.parametrize(("n", "expected"), [(6, (0, 5)), (10, (1, 8)), (20, (5, 14)), (30, (9, 20))])
def test_exact_ranks_match_binomial_tables(n, expected):
    assert median_ci_ranks(n, 0.95) == expected


def test_too_few_samples_for_a_ci():
    assert median_ci_ranks(5, 0.95) is None  # 2 * (1/2)^5 = 6.25% > 5%
    assert median_ci_ranks(0, 0.95) is None
    assert median_ci_ranks(5, 0.90) == (0, 4)  # 6.25% <= 10%


@pytest.mark.parametrize("n", [6, 7, 15, 40, 101, 300])
def test_exact_ranks_are_the_tightest_that_keep_coverage(n):
    lo, hi = median_ci_ranks(n, 0.95)
    assert hi == n - 1 - lo
    k = lo + 1  # 1-based lower rank
    assert 1 - 2 * _binom_cdf_half(n, k - 1) >= 0.95
    assert 1 - 2 * _binom_cdf_half(n, k) < 0.95  # one rank tighter would undercover


def test_normal_approximation_continues_the_exact_ranks():
    lo_exact, _ = median_ci_ranks(stats.EXACT_MAX_N, 0.95)
    lo_normal, hi_normal = median_ci_ranks(stats.EXACT_MAX_N + 1, 0.95)
    assert abs(lo_normal - lo_exact) <= 1
    assert hi_normal == stats.EXACT_MAX_N + 1 - 1 - lo_normal


@pytest.mark.parametrize(("n", "draws"), [(12, 3000), (30, 3000), (501, 1000)])
def test_ci_covers_true_median_about_95_percent(n, draws):
    """Lognormal (skewed, like latencies): true median = exp(mu). Seeded, so deterministic."""
    rng = np.random.default_rng(1234 + n)
    mu, true_median = 0.3, math.exp(0.3)
    samples = rng.lognormal(mu, 0.5, size=(draws, n))
    covered = 0
    for row in samples:
        lo, hi = median_ci(row.tolist(), 0.95)
        covered += lo <= true_median <= hi
    coverage = covered / draws
    assert 0.935 <= coverage <= 0.99, coverage


def test_ci_coverage_on_a_heavy_tailed_mix():
    """1 ms +- 10 us with 10% outliers at +4 ms: true median solves 0.9 * Phi((m - 1) / 0.01) = 0.5."""
    true_median = 1.0 + 0.01 * NormalDist().inv_cdf(0.5 / 0.9)
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(2000):
        x = 1.0 + rng.normal(0, 0.01, 40) + (rng.random(40) < 0.1) * 4.0
        lo, hi = median_ci(x.tolist())
        hits += lo <= true_median <= hi
    assert 0.935 <= hits / 2000 <= 0.99


def test_summarize_figures():
    s = summarize([4.0, 1.0, 3.0, 2.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], warmup=3, method="cpu_clock")
    assert s.median_ms == 5.5 and s.mean_ms == 5.5
    assert s.min_ms == 1.0 and s.max_ms == 10.0 and s.n == 10
    assert s.stdev_ms == pytest.approx(np.std(np.arange(1, 11), ddof=1))
    assert s.iqr_ms == pytest.approx(np.percentile(np.arange(1, 11), 75) - np.percentile(np.arange(1, 11), 25))
    assert (s.ci_low_ms, s.ci_high_ms, s.ci_level) == (2.0, 9.0, 0.95)
    assert s.warmup == 3 and s.method == "cpu_clock" and s.flags == []


def test_summarize_single_sample():
    s = summarize([2.5])
    assert s.median_ms == 2.5 and s.stdev_ms == 0.0 and s.iqr_ms == 0.0
    assert s.ci_low_ms is None and s.ci_level is None
    assert s.flags == ["few_samples"]


def test_wide_ci_flag_depends_on_target():
    noisy = [1.0, 1.5, 0.7, 1.2, 0.9, 1.4, 0.8, 1.1, 1.3, 1.0]
    assert "wide_ci" in summarize(noisy, target_rel_ci=0.01).flags
    assert "wide_ci" not in summarize(noisy, target_rel_ci=0.5).flags
    assert "wide_ci" not in summarize(noisy).flags  # no target, no verdict
    tight = [1.0 + 1e-4 * i for i in range(50)]
    assert summarize(tight, target_rel_ci=0.01).flags == []


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [1.0, float("inf")], [-0.1, 1.0]])
def test_summarize_rejects_bad_samples(bad):
    with pytest.raises(ValueError):
        summarize(bad)


def test_rel_ci_halfwidth():
    xs = [float(i) for i in range(1, 21)]  # ranks 6..15 -> values 6, 15; median 10.5
    assert rel_ci_halfwidth(xs) == pytest.approx((15 - 6) / 2 / 10.5)
    assert rel_ci_halfwidth([1.0, 2.0]) is None


def test_bad_level_rejected():
    with pytest.raises(ValueError):
        median_ci_ranks(10, 1.0)
    with pytest.raises(ValueError):
        summarize([1.0, 2.0], ci_level=0.0)


def test_compare_same_distribution_includes_one():
    rng = np.random.default_rng(3)
    a = rng.lognormal(0, 0.05, 200).tolist()
    b = rng.lognormal(0, 0.05, 200).tolist()
    c = compare_medians(a, b)
    assert c.ci_low <= 1.0 <= c.ci_high
    assert not c.is_slower() and not c.is_faster()
    assert c.n_baseline == 200 and c.n_candidate == 200


def test_compare_detects_a_20_percent_regression_and_speedup():
    rng = np.random.default_rng(4)
    base = rng.lognormal(0, 0.05, 100).tolist()
    slow = (1.2 * rng.lognormal(0, 0.05, 100)).tolist()
    c = compare_medians(base, slow)
    assert 1.1 < c.ratio < 1.3 and c.ci_low <= c.ratio <= c.ci_high
    assert c.is_slower(0.05) and not c.is_slower(0.5) and not c.is_faster()
    assert compare_medians(slow, base).is_faster(0.05)


def test_compare_is_repeatable_and_seeded():
    rng = np.random.default_rng(5)
    a, b = rng.random(60).tolist(), rng.random(60).tolist()
    assert compare_medians(a, b) == compare_medians(a, b)
    assert compare_medians(a, b, seed=1) != compare_medians(a, b, seed=2)


def test_compare_rejects_zero_baseline():
    with pytest.raises(ValueError):
        compare_medians([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])


def _rounds(levels: list[float], n: int = 10, spread: float = 0.01) -> list[list[float]]:
    """One round of `n` samples around each level (a machine whose speed shifts between rounds)."""
    return [[level * (1 + spread * (i - n / 2) / n) for i in range(n)] for level in levels]


def test_a_speed_shift_between_rounds_moves_the_pooled_ratio_not_the_paired_one():
    # the same kernel on both sides; the machine is 1.7x slower in the reference's first three rounds and
    # in only two of the solution's (an episode that ended between them)
    reference = _rounds([1.7, 1.7, 1.7, 1.0, 1.0, 1.0])
    solution = _rounds([1.7, 1.7, 1.0, 1.0, 1.0, 1.0])
    pooled = stats.summarize([x for r in reference for x in r]).median_ms / stats.summarize(
        [x for r in solution for x in r]).median_ms
    assert pooled > 1.25  # the pooled median of the reference fell on the slow level
    assert stats.paired_speedup(reference, solution) == pytest.approx(1.0, abs=0.01)


def test_a_real_speedup_survives_pairing():
    reference = _rounds([2.0, 3.4, 2.0, 2.0, 3.4])
    solution = _rounds([1.0, 1.7, 1.0, 1.0, 1.7])
    assert stats.paired_speedup(reference, solution) == pytest.approx(2.0, rel=0.01)


@pytest.mark.parametrize("reference, solution", [
    (_rounds([1.0, 1.0]), _rounds([1.0, 1.0])),  # too few pairs
    (_rounds([1.0, 1.0, 1.0]), _rounds([1.0, 1.0, 1.0, 1.0])),  # the reference missed a round: no pairing
    (_rounds([1.0, 1.0, 1.0]), _rounds([1.0, 1.0, 0.0], spread=0.0)),  # a zero median: no ratio
])
def test_rounds_that_do_not_pair_give_no_paired_speedup(reference, solution):
    assert stats.paired_speedup(reference, solution) is None
