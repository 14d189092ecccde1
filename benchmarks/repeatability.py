"""Run-to-run repeatability of solbench's timing (issue: timing you can trust).

Runs each problem's reference twice, in two separate `solbench run` invocations, and prints per
workload: the median latency, the ratio run 2 / run 1, and the ratio of the reference timed as the
solution to the reference timing within the same run ("same code, same run"). The targets checked:

- every workload with a median >= 20 us agrees run to run within +-3 %;
- the median |ratio - 1| over all workloads is <= 1 %;
- within a run, the reference timed as a solution agrees with the reference timing within +-3 %.

    python benchmarks/repeatability.py PROBLEM_DIR [PROBLEM_DIR ...] [--device cuda] [--max-workloads 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIN_MEDIAN_MS = 0.020
TOLERANCE = 0.03
MEDIAN_TARGET = 0.01


def run_once(problems: list[Path], out: Path, args: argparse.Namespace) -> float:
    started = time.monotonic()
    for problem in problems:
        cmd = [sys.executable, "-m", "solbench", "run", str(problem), "-o", str(out), "--json",
               "--device", args.device, "--trials", "1"]
        if args.max_workloads:
            cmd += ["--max-workloads", str(args.max_workloads)]
        cmd += args.run_arg
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        result = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if result.returncode not in (0, 1):
            print(result.stderr[-2000:], file=sys.stderr)
    return time.monotonic() - started


def load(path: Path) -> dict[tuple[str, str], dict]:
    traces = {}
    for line in path.read_text().splitlines():
        t = json.loads(line)
        if t["evaluation"]["status"] == "PASSED":
            traces[(t["definition"], t["workload"]["uuid"])] = t
    return traces


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--max-workloads", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    parser.add_argument("--run-arg", action="append", default=[],
                        help="extra argument for `solbench run`, e.g. --run-arg=--fresh-inputs-budget=0; repeatable")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        first, second = Path(tmp) / "run1.jsonl", Path(tmp) / "run2.jsonl"
        wall1 = run_once(args.problems, first, args)
        wall2 = run_once(args.problems, second, args)
        one, two = load(first), load(second)
    rows = []
    for key in sorted(one.keys() & two.keys()):
        a, b = one[key]["evaluation"], two[key]["evaluation"]
        pa, pb = a["performance"], b["performance"]
        same_run = pa["latency_ms"] / pa["reference_latency_ms"] if pa.get("reference_latency_ms") else None
        same_run2 = pb["latency_ms"] / pb["reference_latency_ms"] if pb.get("reference_latency_ms") else None
        ci = pa["latency"] or {}
        half = ((ci.get("ci_high_ms") or 0) - (ci.get("ci_low_ms") or 0)) / 2 / pa["latency_ms"] if ci else None
        rows.append({"problem": key[0], "axes": one[key]["workload"]["axes"], "median_ms": pa["latency_ms"],
                     "run2_over_run1": pb["latency_ms"] / pa["latency_ms"], "solution_over_reference": same_run,
                     "solution_over_reference_run2": same_run2,
                     "ci_halfwidth_rel": half, "n": ci.get("n"), "seconds": a.get("seconds"),
                     "flags": ci.get("flags", []), "host_ms": pa.get("host_launch_ms"),
                     "gpu_busy_ms": pa.get("gpu_busy_ms"), "run2_host_ms": pb.get("host_launch_ms")})
    print(f"{'problem':36} {'axes':28} {'median ms':>10} {'run2/run1':>9} {'sol/ref 1/2':>11} {'±ci%':>6} {'n':>5} "
          f"{'host ms':>8} {'busy ms':>8} {'s/wl':>6} flags")

    def ms(value) -> str:
        return f"{value:8.4f}" if isinstance(value, (int, float)) else f"{'-':>8}"

    for r in rows:
        axes = " ".join(f"{k}={v}" for k, v in r["axes"].items())[:28]
        same = "/".join(f"{v:.3f}" for v in (r["solution_over_reference"], r["solution_over_reference_run2"]) if v)
        half = f"{100 * r['ci_halfwidth_rel']:.2f}" if r["ci_halfwidth_rel"] is not None else "-"
        flags = ",".join(f for f in r["flags"] if f not in ("timed_inputs_fixed",))
        print(f"{r['problem'][:36]:36} {axes:28} {r['median_ms']:10.4f} {r['run2_over_run1']:9.3f} {same:>11} "
              f"{half:>6} {r['n'] or 0:5d} {ms(r['host_ms'])} {ms(r['gpu_busy_ms'])} {r['seconds'] or 0:6.2f} {flags}")
    if not rows:
        print("no workload passed in both runs")
        return 1
    deviations = [abs(r["run2_over_run1"] - 1) for r in rows]
    long_ones = [r for r in rows if r["median_ms"] >= MIN_MEDIAN_MS]
    worst_long = max((abs(r["run2_over_run1"] - 1) for r in long_ones), default=0.0)
    same = [abs(r[key] - 1) for r in rows for key in ("solution_over_reference", "solution_over_reference_run2")
            if r[key]]
    checks = {
        f"every workload >= 20 us within ±3% run to run (worst {100 * worst_long:.2f}%)": worst_long <= TOLERANCE,
        f"median |run2/run1 - 1| <= 1% ({100 * statistics.median(deviations):.2f}%)":
            statistics.median(deviations) <= MEDIAN_TARGET,
        f"same run: solution vs reference within ±3% (worst {100 * max(same, default=0):.2f}%)":
            max(same, default=0) <= TOLERANCE,
    }
    print(f"\n{len(rows)} workloads; wall time run 1 {wall1:.0f} s, run 2 {wall2:.0f} s; "
          f"median harness seconds per workload {statistics.median([r['seconds'] or 0 for r in rows]):.2f}")
    for text, ok in checks.items():
        print(("PASS " if ok else "FAIL ") + text)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
