"""The leaderboard: one row per (solution, problem, hardware) plus one summary row per (solution, hardware).

Column names and meanings are stable (docs/leaderboard.md is generated from `COLUMNS`); downstream
CI gates read this CSV back (`read_leaderboard`), so a renamed column is a format change.
Aggregation rules, in one place:

- only PASSED workloads have latencies; geometric means are over them;
- SKIPPED workloads (cannot run on this machine) count in `workloads`/`skipped` and nowhere else;
- failures count in `pass_rate`, score 0 in `mean_sol_score` and are never fast in `fast_1`/`fast_2`;
- passed workloads with numerics flags (docs/anticheat.md, "Numerics") pass, and are counted in
  `numerics_flagged`;
- summary rows weigh every problem equally (the mean of the problem rows), so a problem with fifty
  workloads does not drown one with three; latencies are not summarised across problems.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from solbench.report.merge import MergeResult, hardware_of
from solbench.spec.errors import SpecError
from solbench.spec.trace import Status, Trace

LEVEL_PROBLEM = "problem"
LEVEL_SOLUTION = "solution"
ALL_PROBLEMS = "*"
FAST_P = (1, 2)
FORMATS = ("csv", "md", "json")


@dataclass(frozen=True)
class Column:
    name: str
    description: str


COLUMNS: tuple[Column, ...] = (
    Column("level", f"`{LEVEL_PROBLEM}`: one (solution, problem, hardware); `{LEVEL_SOLUTION}`: the summary of one "
                    "solution over its problems on one hardware"),
    Column("solution", "solution name"),
    Column("solution_hash", "content hash of the solution's code and build spec (empty on a summary row whose "
                            "problems ran different code)"),
    Column("problem", f"problem (definition) name; `{ALL_PROBLEMS}` on summary rows"),
    Column("hardware", "GPU (or CPU) name from the trace's environment; `unknown` when not recorded"),
    Column("device", "`cuda` or `cpu`"),
    Column("problems", "number of problems in the row (1 on problem rows)"),
    Column("workloads", "workloads with a result after merging (passed + failed + skipped)"),
    Column("passed", "workloads with status PASSED"),
    Column("failed", "workloads with a failure status (INCORRECT_*, RUNTIME_ERROR, COMPILE_ERROR, TIMEOUT, "
                     "REWARD_HACK, INVALID_REFERENCE, MISSING_DATA)"),
    Column("skipped", "workloads SKIPPED (could not run on this machine; not failures)"),
    Column("conflicts", "workloads set aside because merged trace files disagree on their status"),
    Column("numerics_flagged", "passed workloads whose numerics were flagged (outliers, mismatches concentrated in "
                               "rows or columns, or a systematic bias inside the tolerance): they pass the official "
                               "rules and would fail in strict mode"),
    Column("pass_rate", "passed / (passed + failed); empty when every workload was skipped"),
    Column("geomean_latency_ms", "geometric mean of the median latency over passed workloads (problem rows only)"),
    Column("latency_ci_low_ms", "geometric mean of the lower bounds of each workload's confidence interval of the "
                                "median: the lowest the geometric mean could be given the measured noise"),
    Column("latency_ci_high_ms", "the same for the upper bounds; empty when a passed workload has no interval"),
    Column("geomean_reference_latency_ms", "geometric mean of the reference's median latency over passed workloads "
                                           "that timed it"),
    Column("geomean_t_sol_ms", "geometric mean of the speed-of-light time T_SOL over passed workloads (needs the "
                               "speed-of-light analysis in the traces)"),
    Column("geomean_speedup_vs_reference", "geometric mean over passed workloads of reference latency / latency; "
                                           "summary rows: geometric mean of the problem rows"),
    Column("geomean_speedup_vs_baseline", "geometric mean over passed workloads of T_baseline / latency, where the "
                                          "trace's speed-of-light analysis names a baseline time"),
    Column("mean_sol_score", "mean SOL score over passed and failed workloads, failures scoring 0; empty when a "
                             "passed workload has no score; summary rows: mean of the problem rows"),
    Column("fast_1", "fraction of passed + failed workloads that passed and beat the reference (speedup > 1)"),
    Column("fast_2", "the same with speedup > 2"),
    Column("workloads_digest", "short hash of the sorted uuids of the passed workloads: two rows whose latencies "
                               "may be compared have the same digest"),
    Column("last_timestamp", "timestamp of the newest trace in the row"),
)
COLUMN_NAMES = tuple(c.name for c in COLUMNS)


def _geomean(values: Iterable[float | None]) -> float:
    logs = [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(logs) / len(logs)) if logs else math.nan


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def sol_value(trace: Trace, key: str) -> float | None:
    """A number from the trace's speed-of-light analysis, or None (missing, null, not a number)."""
    return _number((trace.evaluation.sol or {}).get(key))


def latency_ms(trace: Trace) -> float | None:
    perf = trace.evaluation.performance
    return _number(perf.latency_ms) if perf else None


def speedup_vs_reference(trace: Trace) -> float | None:
    perf = trace.evaluation.performance
    return _number(perf.speedup_factor) if perf else None


def speedup_vs_baseline(trace: Trace) -> float | None:
    baseline, latency = sol_value(trace, "t_baseline_ms"), latency_ms(trace)
    return baseline / latency if baseline and latency else None


def latency_ci_ms(trace: Trace) -> tuple[float | None, float | None]:
    perf = trace.evaluation.performance
    stats = perf.latency if perf else None
    return (_number(stats.ci_low_ms), _number(stats.ci_high_ms)) if stats else (None, None)


def workloads_digest(uuids: Iterable[str]) -> str:
    """Identity of a set of workloads, so a gate never compares geometric means over different sets."""
    return hashlib.sha256("\n".join(sorted(uuids)).encode()).hexdigest()[:12]


def problem_row(traces: list[Trace], conflicts: int = 0) -> dict:
    """Aggregate the merged traces of one (solution, problem, hardware)."""
    first = traces[0]
    passed = [t for t in traces if t.status == Status.PASSED]
    failed = [t for t in traces if t.status.failed]
    evaluated = len(passed) + len(failed)
    cis = [latency_ci_ms(t) for t in passed]
    has_ci = bool(cis) and all(lo is not None and hi is not None for lo, hi in cis)
    scores = [sol_value(t, "score") for t in passed]
    mean_score = (sum(scores) / evaluated if evaluated and all(s is not None for s in scores) else math.nan)
    fast = {p: (sum(1 for t in passed if (speedup_vs_reference(t) or 0) > p) / evaluated if evaluated else math.nan)
            for p in FAST_P}
    env = first.evaluation.environment
    return {
        "level": LEVEL_PROBLEM, "solution": first.solution, "solution_hash": first.solution_hash,
        "problem": first.definition, "hardware": hardware_of(first), "device": env.device if env else "",
        "problems": 1, "workloads": len(traces), "passed": len(passed), "failed": len(failed),
        "skipped": len(traces) - evaluated, "conflicts": conflicts,
        "numerics_flagged": sum(1 for t in passed if t.numerics_flags),
        "pass_rate": len(passed) / evaluated if evaluated else math.nan,
        "geomean_latency_ms": _geomean(latency_ms(t) for t in passed),
        "latency_ci_low_ms": _geomean(lo for lo, _ in cis) if has_ci else math.nan,
        "latency_ci_high_ms": _geomean(hi for _, hi in cis) if has_ci else math.nan,
        "geomean_reference_latency_ms": _geomean(t.evaluation.performance.reference_latency_ms for t in passed),
        "geomean_t_sol_ms": _geomean(sol_value(t, "t_sol_ms") for t in passed),
        "geomean_speedup_vs_reference": _geomean(speedup_vs_reference(t) for t in passed),
        "geomean_speedup_vs_baseline": _geomean(speedup_vs_baseline(t) for t in passed),
        "mean_sol_score": mean_score, "fast_1": fast[1], "fast_2": fast[2],
        "workloads_digest": workloads_digest(t.workload_uuid for t in passed),
        "last_timestamp": max(t.evaluation.timestamp or "" for t in traces),
    }


def _mean_or_nan(values: list[float]) -> float:
    if not values or any(math.isnan(v) for v in values):
        return math.nan
    return sum(values) / len(values)


def solution_row(rows: list[dict]) -> dict:
    """Summarise the problem rows of one (solution, hardware); every problem weighs the same."""
    passed, failed = sum(r["passed"] for r in rows), sum(r["failed"] for r in rows)
    hashes = {r["solution_hash"] for r in rows}
    evaluated = [r for r in rows if r["passed"] + r["failed"]]
    return {
        "level": LEVEL_SOLUTION, "solution": rows[0]["solution"], "solution_hash": hashes.pop() if len(hashes) == 1 else "",
        "problem": ALL_PROBLEMS, "hardware": rows[0]["hardware"], "device": rows[0]["device"],
        "problems": len(rows),
        **{k: sum(r[k] for r in rows)
           for k in ("workloads", "passed", "failed", "skipped", "conflicts", "numerics_flagged")},
        "pass_rate": passed / (passed + failed) if passed + failed else math.nan,
        "geomean_latency_ms": math.nan, "latency_ci_low_ms": math.nan, "latency_ci_high_ms": math.nan,
        "geomean_reference_latency_ms": math.nan, "geomean_t_sol_ms": math.nan,
        "geomean_speedup_vs_reference": _geomean(r["geomean_speedup_vs_reference"] for r in rows),
        "geomean_speedup_vs_baseline": _geomean(r["geomean_speedup_vs_baseline"] for r in rows),
        "mean_sol_score": _mean_or_nan([r["mean_sol_score"] for r in evaluated]),
        "fast_1": _mean_or_nan([r["fast_1"] for r in evaluated]),
        "fast_2": _mean_or_nan([r["fast_2"] for r in evaluated]),
        "workloads_digest": "",
        "last_timestamp": max(r["last_timestamp"] for r in rows),
    }


def leaderboard(merged: MergeResult | list[Trace]) -> pd.DataFrame:
    """The leaderboard table of merged traces (see `COLUMNS`)."""
    if not isinstance(merged, MergeResult):
        merged = MergeResult(traces=list(merged))
    conflicts = merged.conflict_counts()
    groups: dict[tuple[str, str, str, str], list[Trace]] = defaultdict(list)
    for t in merged.traces:
        groups[(hardware_of(t), t.definition, t.solution, t.solution_hash)].append(t)
    problem_rows = [problem_row(items, conflicts.get((problem, digest, hardware), 0))
                    for (hardware, problem, _, digest), items in sorted(groups.items())]
    by_solution: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in problem_rows:
        by_solution[(row["hardware"], row["solution"])].append(row)
    summary_rows = [solution_row(rows) for _, rows in sorted(by_solution.items())]
    frame = pd.DataFrame(problem_rows + summary_rows, columns=list(COLUMN_NAMES))
    return frame.astype({k: "int64" for k in ("problems", "workloads", "passed", "failed", "skipped", "conflicts",
                                              "numerics_flagged")})


# -- formats ----------------------------------------------------------------------------------

def _cell(value) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.4g}"
    return str(value)


def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (n/a for missing numbers)."""
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines) + "\n"


def to_json(frame: pd.DataFrame) -> str:
    records = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
               for row in frame.to_dict(orient="records")]
    return json.dumps({"columns": list(frame.columns), "rows": records}, indent=1, allow_nan=False) + "\n"


def render(frame: pd.DataFrame, fmt: str) -> str:
    if fmt == "csv":
        return frame.to_csv(index=False, float_format="%.6g")
    if fmt == "md":
        return to_markdown(frame)
    if fmt == "json":
        return to_json(frame)
    raise SpecError(f"unknown leaderboard format {fmt!r} (one of {', '.join(FORMATS)})")


def format_for(path: Path | None, fmt: str | None) -> str:
    """The format asked for, else the output file's suffix, else CSV."""
    if fmt:
        return fmt
    suffix = path.suffix.lstrip(".").lower() if path else ""
    return {"markdown": "md"}.get(suffix, suffix) if suffix in (*FORMATS, "markdown") else "csv"


def read_leaderboard(path: str | Path) -> pd.DataFrame:
    """A leaderboard CSV written by `solbench leaderboard`, checked for the columns a gate needs."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"leaderboard {path} does not exist")
    try:
        frame = pd.read_csv(path, dtype={"solution": str, "problem": str, "hardware": str, "solution_hash": str},
                            keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: not a leaderboard CSV: {exc}") from None
    missing = [c for c in ("level", "solution", "problem", "hardware", "geomean_latency_ms") if c not in frame.columns]
    if missing:
        raise SpecError(f"{path}: not a leaderboard CSV (no column {', '.join(missing)})")
    frame.attrs["older_format"] = [c.name for c in COLUMNS if c.name not in frame.columns]
    return frame


def older_format_note(frame: pd.DataFrame, path: str | Path) -> str | None:
    """Said when a leaderboard CSV was written by an older solbench (columns of the current format missing):
    it still gates speed, but should be regenerated."""
    missing = frame.attrs.get("older_format") or []
    if not missing:
        return None
    return (f"{path} is an older leaderboard format (no {', '.join(missing)} column): it gates speed as before; "
            f"regenerate it with `solbench leaderboard TRACES -o {path}`")
