"""Latency statistics: summaries, a distribution-free CI of the median, and two-sample comparison.

Why the median and an order-statistic CI: kernel latencies are skewed (a few slow iterations from
interrupts, clock changes, other tenants), so the mean and a normal-theory CI mislead. The number of
samples below the true median is Binomial(n, 1/2) whatever the distribution, so a pair of order
statistics brackets the median with a known probability -- no distributional assumption at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

from solbench.spec.trace import LatencyStats

EXACT_MAX_N = 300  # exact binomial ranks up to here, normal approximation above
FLAG_WIDE_CI = "wide_ci"
FLAG_FEW_SAMPLES = "few_samples"


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level!r}")


@lru_cache(maxsize=4096)
def median_ci_ranks(n: int, level: float = 0.95) -> tuple[int, int] | None:
    """0-based order-statistic indices (lo, hi) whose values bracket the median with >= `level`
    probability, or None when n is too small for that level (e.g. n < 6 at 95%).

    Exact: the largest k with P(Bin(n, 1/2) <= k - 1) <= (1 - level) / 2 gives the interval
    [x_(k), x_(n+1-k)] (1-based), coverage 1 - 2 P(Bin <= k - 1) >= level. Large n: the normal
    approximation of the same binomial, k = floor((n - z sqrt(n)) / 2).
    """
    _check_level(level)
    if n < 1:
        return None
    alpha_half = (1.0 - level) / 2.0
    if n <= EXACT_MAX_N:
        total = 1 << n
        cumulative = 0  # sum_{i <= k-1} C(n, i)
        k = 0
        while k < n // 2 + 1:
            nxt = cumulative + math.comb(n, k)
            if nxt / total > alpha_half:
                break
            cumulative = nxt
            k += 1
        if k < 1:
            return None
    else:
        z = NormalDist().inv_cdf(1.0 - alpha_half)
        k = math.floor((n - z * math.sqrt(n)) / 2.0)
        if k < 1:
            return None
    return k - 1, n - k


def _median_sorted(xs: Sequence[float]) -> float:
    n = len(xs)
    mid = n // 2
    return float(xs[mid]) if n % 2 else (xs[mid - 1] + xs[mid]) / 2.0


def _quantile_sorted(xs: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (the common 'type 7' definition)."""
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _clean_sorted(samples_ms: Sequence[float]) -> list[float]:
    xs = sorted(float(x) for x in samples_ms)
    if not xs:
        raise ValueError("no latency samples")
    if not all(math.isfinite(x) for x in xs):
        raise ValueError("latency samples contain NaN or Inf")
    if xs[0] < 0:
        raise ValueError(f"negative latency sample {xs[0]!r} ms")
    return xs


PAIRED_MIN_ROUNDS = 3  # fewer pairs than this: a median of ratios is no steadier than the pooled one


def paired_speedup(reference_rounds: Sequence[Sequence[float]],
                   candidate_rounds: Sequence[Sequence[float]]) -> float | None:
    """The median, over interleaved rounds, of the reference's round median over the candidate's.

    Why: a machine whose speed changes in episodes longer than one round (a 2-core VM's other tenants:
    docs/timing.md, "CPU timings") gives bimodal pooled samples, and a pooled median lands on either level
    depending on which side a few rounds fell into an episode; a round and its neighbour on the other side
    mostly share one level, so their ratio does not move with it. None where the rounds cannot be paired."""
    pairs = [(r, c) for r, c in zip(reference_rounds, candidate_rounds) if r and c]
    if len(reference_rounds) != len(candidate_rounds) or len(pairs) < PAIRED_MIN_ROUNDS:
        return None
    ratios = []
    for reference, candidate in pairs:
        candidate_median = _median_sorted(_clean_sorted(candidate))
        if candidate_median <= 0:
            return None
        ratios.append(_median_sorted(_clean_sorted(reference)) / candidate_median)
    return _median_sorted(sorted(ratios))


def median_ci(samples_ms: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free confidence interval of the median, or None when there are too few samples."""
    xs = _clean_sorted(samples_ms)
    ranks = median_ci_ranks(len(xs), level)
    if ranks is None:
        return None
    return xs[ranks[0]], xs[ranks[1]]


def rel_ci_halfwidth(samples_ms: Sequence[float], level: float = 0.95) -> float | None:
    """Half the CI width over the median; what adaptive stopping drives below its target."""
    xs = _clean_sorted(samples_ms)
    ranks = median_ci_ranks(len(xs), level)
    med = _median_sorted(xs)
    if ranks is None or med <= 0:
        return None
    return (xs[ranks[1]] - xs[ranks[0]]) / 2.0 / med


def summarize(samples_ms: Sequence[float], *, warmup: int = 0, method: str = "", ci_level: float = 0.95,
              target_rel_ci: float | None = None) -> LatencyStats:
    """Summarise per-iteration latencies (ms) into a `LatencyStats`.

    Flags: "few_samples" when n is too small for a CI at `ci_level`; "wide_ci" when the CI's relative
    half-width exceeds `target_rel_ci` (only checked when a target is given).
    """
    _check_level(ci_level)
    xs = _clean_sorted(samples_ms)
    n = len(xs)
    mean = math.fsum(xs) / n
    stdev = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    med = _median_sorted(xs)
    ranks = median_ci_ranks(n, ci_level)
    flags: list[str] = []
    ci_low = ci_high = None
    if ranks is None:
        flags.append(FLAG_FEW_SAMPLES)
    else:
        ci_low, ci_high = xs[ranks[0]], xs[ranks[1]]
        if target_rel_ci is not None and med > 0 and (ci_high - ci_low) / 2.0 / med > target_rel_ci:
            flags.append(FLAG_WIDE_CI)
    return LatencyStats(
        median_ms=med, mean_ms=mean, min_ms=xs[0], max_ms=xs[-1], stdev_ms=stdev, n=n,
        ci_low_ms=ci_low, ci_high_ms=ci_high, ci_level=ci_level if ranks is not None else None,
        iqr_ms=_quantile_sorted(xs, 0.75) - _quantile_sorted(xs, 0.25),
        warmup=warmup, method=method, flags=flags,
    )


@dataclass(frozen=True)
class Comparison:
    """`ratio` = median(candidate) / median(baseline): above 1 the candidate is slower."""

    ratio: float
    ci_low: float
    ci_high: float
    level: float
    n_baseline: int
    n_candidate: int
    method: str = "bootstrap_percentile"

    def is_slower(self, tolerance: float = 0.0) -> bool:
        """The candidate is slower by more than `tolerance` (relative) with confidence `level`."""
        return self.ci_low > 1.0 + tolerance

    def is_faster(self, tolerance: float = 0.0) -> bool:
        return self.ci_high < 1.0 - tolerance

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "ci_low": self.ci_low, "ci_high": self.ci_high, "level": self.level,
                "n_baseline": self.n_baseline, "n_candidate": self.n_candidate, "method": self.method}


def compare_medians(baseline_ms: Sequence[float], candidate_ms: Sequence[float], *, level: float = 0.95,
                    n_boot: int = 2000, seed: int = 0) -> Comparison:
    """Ratio of medians (candidate / baseline) with a percentile-bootstrap CI.

    The bootstrap resamples each set independently; the RNG is private and seeded, so the same
    inputs always give the same verdict (a regression gate must be repeatable).
    """
    import numpy as np  # local: keeps `summarize` importable without numpy

    _check_level(level)
    if n_boot < 100:
        raise ValueError("n_boot must be at least 100")
    base = np.asarray(_clean_sorted(baseline_ms))
    cand = np.asarray(_clean_sorted(candidate_ms))
    if _median_sorted(base.tolist()) <= 0:
        raise ValueError("baseline median must be positive")
    rng = np.random.Generator(np.random.PCG64(seed))
    ratios = np.empty(n_boot)
    chunk = max(1, 2_000_000 // max(len(base), len(cand)))
    for start in range(0, n_boot, chunk):
        m = min(chunk, n_boot - start)
        b = np.median(base[rng.integers(0, len(base), size=(m, len(base)))], axis=1)
        c = np.median(cand[rng.integers(0, len(cand), size=(m, len(cand)))], axis=1)
        ratios[start:start + m] = c / np.maximum(b, np.finfo(float).tiny)
    alpha = 1.0 - level
    lo, hi = np.quantile(ratios, [alpha / 2.0, 1.0 - alpha / 2.0])
    ratio = _median_sorted(cand.tolist()) / _median_sorted(base.tolist())
    return Comparison(ratio=float(ratio), ci_low=float(lo), ci_high=float(hi), level=level,
                      n_baseline=len(base), n_candidate=len(cand))
