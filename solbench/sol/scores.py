"""SOL scores: how much of the gap between the baseline and the hardware limit a kernel closed.

anchored_score  S = 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL)): 0.5 at the baseline, 1.0 at SOL.
log_score       0.5 + 0.5 * log(T_b / T_k) / log(T_b / T_SOL): the same anchors, log-scaled, so a
                2x step counts the same wherever it happens.

Edge cases (both scores are clamped to [0, 1]):
- a failed workload, or a missing / non-finite / non-positive T_k: 0.
- T_k below T_SOL (possible: the bound is a convention, not the rejection limit): 1.
- T_SOL <= 0 (no bound known): the anchored score becomes T_b / (T_b + T_k); the log score is None.
- T_b <= T_SOL (the baseline already reaches the bound, no gap to close): matching the baseline
  scores 1; slower kernels T_b / T_k (anchored) and 1 + 0.5 * log2(T_b / T_k) (log).
- no baseline (T_b missing or <= 0): None (nothing to anchor on).
- an approximate bound that a measured time beats is no bound: `sol.record` gives None there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


def _ok(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))


def anchored_score(t_k_ms: float | None, t_b_ms: float | None, t_sol_ms: float | None) -> float | None:
    if not _ok(t_b_ms):
        return None
    if not _ok(t_k_ms):
        return 0.0
    t_sol = t_sol_ms if _ok(t_sol_ms) else 0.0
    if t_b_ms <= t_sol:
        return _clamp(t_b_ms / t_k_ms)
    if t_k_ms <= t_sol:
        return 1.0
    return _clamp(1.0 / (1.0 + (t_k_ms - t_sol) / (t_b_ms - t_sol)))


def log_score(t_k_ms: float | None, t_b_ms: float | None, t_sol_ms: float | None) -> float | None:
    if not _ok(t_b_ms):
        return None
    if not _ok(t_k_ms):
        return 0.0
    if not _ok(t_sol_ms):
        return None
    if t_b_ms <= t_sol_ms:
        return _clamp(1.0 + 0.5 * math.log2(t_b_ms / t_k_ms)) if t_k_ms > t_b_ms else 1.0
    if t_k_ms <= t_sol_ms:
        return 1.0
    return _clamp(0.5 + 0.5 * math.log(t_b_ms / t_k_ms) / math.log(t_b_ms / t_sol_ms))


@dataclass(frozen=True)
class ProblemSummary:
    workloads: int
    passed: int
    pass_rate: float
    mean_score: float | None  # failed workloads count 0
    mean_log_score: float | None
    geomean_speedup: float | None  # over passed workloads with a speedup

    def to_dict(self) -> dict:
        return asdict(self)


def _item_values(item) -> tuple[bool, float | None, float | None, float | None]:
    """(passed, score, log_score, speedup) from a Trace or a plain dict."""
    if isinstance(item, dict):
        return (bool(item.get("passed")), item.get("score"), item.get("log_score"), item.get("speedup"))
    ev = item.evaluation
    passed = str(ev.status) == "PASSED"
    sol = ev.sol or {}
    speedup = ev.performance.speedup_factor if ev.performance is not None else None
    if speedup is None and sol.get("t_baseline_ms") and ev.performance is not None and ev.performance.latency_ms:
        speedup = sol["t_baseline_ms"] / ev.performance.latency_ms
    return passed, sol.get("score"), sol.get("log_score"), speedup


def problem_summary(items) -> ProblemSummary:
    """Mean scores (failed = 0), geometric-mean speedup (passed only) and pass rate of one problem.

    `items`: `solbench.spec.trace.Trace` objects, or dicts with passed / score / log_score / speedup.
    """
    rows = [_item_values(i) for i in items]
    n = len(rows)
    passed = sum(1 for r in rows if r[0])
    scores = [(r[1] if r[0] and r[1] is not None else 0.0) for r in rows if not r[0] or r[1] is not None]
    logs = [(r[2] if r[0] and r[2] is not None else 0.0) for r in rows if not r[0] or r[2] is not None]
    speedups = [r[3] for r in rows if r[0] and _ok(r[3])]
    geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
    return ProblemSummary(n, passed, passed / n if n else 0.0,
                          sum(scores) / len(scores) if scores else None,
                          sum(logs) / len(logs) if logs else None, geo)
