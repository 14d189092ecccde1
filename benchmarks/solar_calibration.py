"""Agreement of solbench's `solar` convention with the published B200 speed-of-light times.

    python benchmarks/solar_calibration.py [SHARED_SOL_EXECBENCH_DIR] [--all] [--verbose]

Reads `calibration_b200.csv` (published sol_ms for 155 workloads of 8 problems), analyses each
workload under the `solar` convention on the `B200` spec (the leaderboard's locked clocks) and
reports the ratio ours / published: median, geometric spread, and the share within 10 %.
With --all it also analyses every workload of every problem (both conventions) and reports how many
were traced exactly, approximately (invented data-dependent values) or not at all, and the time taken.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from solbench.sol.analyser import analyse_workload, sol_time_ms  # noqa: E402
from solbench.sol.hardware import load_spec  # noqa: E402
from solbench.spec.problem import discover_problems, load_problem  # noqa: E402

DEFAULT_DIR = ROOT.parent / "shared" / "sol-execbench"


def calibration_agreement(data_dir: Path) -> dict:
    """Ratios ours/published per workload, grouped by problem, with summary statistics."""
    hw = load_spec("B200")
    problems: dict = {}
    per_problem: dict[str, list[float]] = defaultdict(list)
    rows = []
    with open(data_dir / "calibration_b200.csv") as f:
        for row in csv.DictReader(f):
            key = (row["category"], row["name"])
            if key not in problems:
                problems[key] = load_problem(data_dir / row["category"] / row["name"])
            problem = problems[key]
            workload = next(w for w in problem.workloads if w.uuid == row["workload_uuid"])
            cost = analyse_workload(problem.definition, workload, convention="solar")
            ours = sol_time_ms(cost, hw).t_sol_ms
            ratio = ours / float(row["sol_ms"])
            per_problem[row["name"]].append(ratio)
            rows.append((row["name"], row["axes"], float(row["sol_ms"]), ours, ratio))
    ratios = [r[-1] for r in rows]
    logs = [math.log(r) for r in ratios]
    return {
        "workloads": len(ratios),
        "median_ratio": statistics.median(ratios),
        "geo_spread": math.exp(statistics.pstdev(logs)),
        "within_10pct": sum(1 for r in ratios if abs(r - 1) <= 0.10) / len(ratios),
        "min_ratio": min(ratios), "max_ratio": max(ratios),
        "per_problem": {k: (statistics.median(v), min(v), max(v)) for k, v in per_problem.items()},
        "rows": rows,
    }


def coverage(data_dir: Path) -> dict:
    """Analyse every workload of every problem under both conventions."""
    methods: Counter = Counter()
    by_problem: dict[str, set] = defaultdict(set)
    unknown: dict[str, set] = defaultdict(set)
    start = time.perf_counter()
    n = 0
    for path in discover_problems(data_dir):
        problem = load_problem(path)
        for workload in problem.workloads:
            for convention in ("strict", "solar"):
                cost = analyse_workload(problem.definition, workload, convention=convention)
            n += 1
            methods[cost.method] += 1
            by_problem[cost.method].add(problem.name)
            unknown[problem.name].update(cost.unknown_ops)
    return {"workloads": n, "seconds": time.perf_counter() - start, "methods": dict(methods),
            "problems_by_method": {k: sorted(v) for k, v in by_problem.items()},
            "unknown_ops": {k: sorted(v) for k, v in unknown.items() if v}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--all", action="store_true", help="also analyse every workload of every problem")
    parser.add_argument("--verbose", action="store_true", help="one line per calibration workload")
    args = parser.parse_args()
    if not (args.data_dir / "calibration_b200.csv").is_file():
        print(f"no calibration_b200.csv in {args.data_dir}", file=sys.stderr)
        return 2
    result = calibration_agreement(args.data_dir)
    if args.verbose:
        for name, axes, published, ours, ratio in result["rows"]:
            print(f"{name:52s} {axes:40s} published {published:9.5f} ours {ours:9.5f} ratio {ratio:6.3f}")
    print(f"solar vs published B200 sol_ms over {result['workloads']} workloads: median ratio "
          f"{result['median_ratio']:.3f}, geometric spread x{result['geo_spread']:.3f}, "
          f"{result['within_10pct']:.0%} within 10 %, range {result['min_ratio']:.3f}-{result['max_ratio']:.3f}")
    for name, (median, lo, hi) in sorted(result["per_problem"].items()):
        print(f"  {name:52s} median {median:6.3f}  min {lo:6.3f}  max {hi:6.3f}")
    if args.all:
        cov = coverage(args.data_dir)
        print(f"\nanalysed {cov['workloads']} workloads x 2 conventions in {cov['seconds']:.1f} s: {cov['methods']}")
        for method, names in cov["problems_by_method"].items():
            if method != "meta":
                print(f"  {method}: {len(names)} problems: {', '.join(names)}")
        for name, ops in cov["unknown_ops"].items():
            print(f"  unknown ops in {name}: {', '.join(ops)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
