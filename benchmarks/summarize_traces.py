"""Summarise a trace file: status counts, failures with their reasons, T_measured / T_SOL, seconds.

    python benchmarks/summarize_traces.py traces.jsonl [--failures 60]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path


def quantiles(values: list[float]) -> str:
    if not values:
        return "none"
    values = sorted(values)
    pick = [values[int(q * (len(values) - 1))] for q in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)]
    return "min {:.3g} | p10 {:.3g} | p25 {:.3g} | median {:.3g} | p75 {:.3g} | p90 {:.3g} | max {:.3g}".format(*pick)


def _flags(node) -> list[str]:
    """Every flag anywhere in a trace's evaluation (timed blocks carry their own)."""
    if isinstance(node, dict):
        found = list(node.get("flags") or []) if isinstance(node.get("flags"), list) else []
        return found + [f for k, v in node.items() if k != "flags" for f in _flags(v)]
    if isinstance(node, list):
        return [f for v in node for f in _flags(v)]
    return []


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("traces", type=Path)
    parser.add_argument("--failures", type=int, default=60)
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.traces.read_text().splitlines() if line.strip()]
    by_status = collections.Counter(r["evaluation"]["status"] for r in rows)
    problems = collections.defaultdict(set)
    for r in rows:
        problems[r["evaluation"]["status"]].add(r["definition"])
    print(f"{len(rows)} workloads of {len({r['definition'] for r in rows})} problems: {dict(by_status)}")
    print("problems by status:", {k: len(v) for k, v in problems.items()})
    ratios, seconds, ftl = [], [], 0
    for r in rows:
        e = r["evaluation"]
        seconds.append(e.get("seconds") or 0)
        sol = e.get("sol") or {}
        if e["status"] == "PASSED" and sol.get("t_sol_ms"):
            ratios.append(e["performance"]["latency_ms"] / sol["t_sol_ms"])
        if e["status"] == "REWARD_HACK" and "hardware limit" in e.get("log", ""):
            ftl += 1
    print(f"rejected as faster than light: {ftl}")
    print(f"T_measured / T_SOL (strict, passed workloads, n={len(ratios)}): {quantiles(ratios)}")
    print(f"harness seconds per workload: {quantiles(seconds)}; total {sum(seconds):.0f} s")
    flags = collections.Counter(flag for r in rows for flag in set(_flags(r["evaluation"])))
    print(f"workloads per flag: {dict(flags.most_common())}")
    latencies = [r["evaluation"]["performance"]["latency_ms"] for r in rows if r["evaluation"]["status"] == "PASSED"]
    print(f"latency ms (passed): {quantiles(latencies)}")
    if latencies:
        print(f"median latency {statistics.median(latencies):.4f} ms")
    shown = 0
    for r in rows:
        e = r["evaluation"]
        if e["status"] in ("PASSED", "SKIPPED") or shown >= args.failures:
            continue
        shown += 1
        lines = [x for x in e.get("log", "").strip().splitlines() if x.strip()]
        reason = next((x for x in lines if "Error" in x or "error" in x), lines[-1] if lines else "")
        print(f"  {r['definition'][:48]:48} {e['status']:20} {reason.strip()[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
