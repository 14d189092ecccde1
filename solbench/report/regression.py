"""The regression gate: is a kernel slower than its recorded result by more than P and than the noise?

Compared per (solution name, problem, hardware) against a leaderboard CSV: the geometric mean latency
of the passed workloads now against the recorded one. Matching by name, not content hash, is the
point: the gate exists to catch a changed kernel getting slower. A regression needs both

- `now / recorded - 1 > max_regression` (the tolerance the user chose), and
- the intervals not overlapping: the lowest the new geometric mean could be (`latency_ci_low_ms`) is
  above the highest the recorded one could be (`latency_ci_high_ms`); when either run has no
  intervals, only the first condition applies and the verdict says so.

Geometric means over different workload sets are not comparable; `workloads_digest` guards that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from solbench.report.leaderboard import LEVEL_PROBLEM, problem_row
from solbench.spec.errors import SpecError
from solbench.spec.trace import Trace


@dataclass(frozen=True)
class Verdict:
    """Outcome of the gate for one (solution, problem): `regressed`, or `comparable` False to skip."""

    regressed: bool
    comparable: bool
    message: str


def parse_fraction(text: str) -> float:
    """'5%' or '0.05' -> 0.05; a regression tolerance must be non-negative."""
    text = str(text).strip()
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise SpecError(f"not a fraction or percentage: {text!r}") from None
    if value < 0 or not math.isfinite(value):
        raise SpecError(f"a regression tolerance must be 0 or more, got {text!r}")
    return value


def _num(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def baseline_row(baseline: pd.DataFrame, solution: str, problem: str, hardware: str,
                 solution_hash: str = "") -> pd.Series | None:
    """The recorded problem row for this kernel; prefers the same code when several versions are recorded."""
    rows = baseline[(baseline["level"] == LEVEL_PROBLEM) & (baseline["solution"] == solution)
                    & (baseline["problem"] == problem) & (baseline["hardware"] == hardware)]
    if len(rows) > 1 and "solution_hash" in rows.columns:
        same = rows[rows["solution_hash"] == solution_hash]
        rows = same if len(same) else rows.sort_values("last_timestamp")
    return rows.iloc[-1] if len(rows) else None


def check(traces: list[Trace], baseline: pd.DataFrame, max_regression: float) -> Verdict:
    """Gate the traces of one (solution, problem, hardware) against the baseline leaderboard."""
    now = problem_row(traces)
    where = f"{now['solution']} on {now['problem']} ({now['hardware']})"
    base = baseline_row(baseline, now["solution"], now["problem"], now["hardware"], now["solution_hash"])
    if base is None:
        return Verdict(False, False, f"no recorded result for {where} in the baseline")
    recorded, current = _num(base["geomean_latency_ms"]), _num(now["geomean_latency_ms"])
    if recorded is None or current is None:
        return Verdict(False, False, f"{where}: no latency to compare (recorded {recorded}, now {current}; "
                                     f"passed {now['passed']}/{now['workloads']})")
    digest = base.get("workloads_digest")
    if isinstance(digest, str) and digest and digest != now["workloads_digest"]:
        return Verdict(False, False, f"{where}: the passed workloads differ from the recorded run "
                                     f"(recorded {base.get('passed')} passed, now {now['passed']}); "
                                     f"geometric means over different workloads are not comparable")
    change = current / recorded - 1
    base_high, now_low = _num(base.get("latency_ci_high_ms")), _num(now["latency_ci_low_ms"])
    has_noise = base_high is not None and now_low is not None
    beyond_noise = now_low > base_high if has_noise else True
    figures = (f"{where}: geometric-mean latency {current:.5g} ms vs recorded {recorded:.5g} ms "
               f"({change:+.1%}, tolerance {max_regression:.1%})")
    noise = (f"; intervals now [{now_low:.5g}, {_num(now['latency_ci_high_ms']):.5g}] ms, recorded "
             f"[{_num(base.get('latency_ci_low_ms'))}, {base_high:.5g}] ms" if has_noise
             else "; no confidence intervals recorded, so only the tolerance applies")
    if change > max_regression and beyond_noise:
        return Verdict(True, True, "REGRESSION " + figures + noise)
    if change > max_regression:
        return Verdict(False, True, "slower but within the measured noise: " + figures + noise)
    return Verdict(False, True, figures + noise)
