"""Where a verdict's time goes: wall time per workload with its phase breakdown, and the total.

    python benchmarks/throughput.py                                  # the 10 problems below, 4 workloads each
    python benchmarks/throughput.py PROBLEM_DIR ... --max-workloads 2 --device cpu
    python benchmarks/throughput.py --json after.json --before before.json   # with a before/after table
    python benchmarks/throughput.py --from-json after.json                   # the table of a saved run

Runs one `solbench run` over the problems (a throw-away dataset folder of copies of them), with the
defaults unless arguments after `--` say otherwise, and reads each trace's `seconds` and `phases_s`:
load (worker start-up and loading), trials, judge (judging and output transfer), timing.* (inside the
timed blocks: setup, capture, warmup, loop, inputs drawn in the loop (a part of warm-up and loop), the
block's end checks, export and release), probe, baselines, sol_analysis, startup (a worker's
first request waiting for its process to start), channel (waiting beyond what the workers reported working)
and other; `gpu_timed` is what the timed calls themselves
took (solution and reference), the part of a verdict that is measurement rather than checking. The
total wall time also counts what happens outside workloads (start-up, job building).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "sol-execbench"
DEFAULT_PROBLEMS = (
    "L1/069_rms_norm", "L1/084_silu_activation_backward", "L1/048_fused_gate_up_projection_with_swiglu",
    "L1/015_grouped_query_attention_with_rope_and_qk_norm", "L2/004_fused_residual_rms_mlp",
    "FlashInfer-Bench/007_gemm_n4096_k4096", "FlashInfer-Bench/021_rmsnorm_h128",
    "Quant/003_fp8_mlp_gate_up_projection", "L1/001_attention_softmax_dropout_value_matmul_backward",
    "L2/005_swiglu_mlp_backward",
)
PHASES = ("load", "trials", "judge", "timing.setup", "timing.capture", "timing.warmup", "timing.loop",
          "timing.inputs_in_loop", "timing.checks", "timing.export", "timing.release", "timing.other", "probe", "baselines",
          "sol_analysis", "trim", "startup", "channel", "other")
SHORT = {"timing.setup": "t.set", "timing.capture": "t.cap", "timing.warmup": "t.warm", "timing.loop": "t.loop",
         "timing.inputs_in_loop": "t.inp", "timing.checks": "t.chk", "timing.export": "t.exp", "timing.release": "t.rel",
         "timing.other": "t.oth", "sol_analysis": "sol", "baselines": "base"}


def problem_dirs(names: list[str]) -> list[Path]:
    if names:
        return [Path(n).resolve() for n in names]
    if not SHARED.is_dir():
        raise SystemExit(f"no problems given and the shared dataset is not at {SHARED}")
    return [SHARED / name for name in DEFAULT_PROBLEMS]


def run(dirs: list[Path], args: argparse.Namespace, extra: list[str], traces: Path) -> float:
    """One `solbench run` over a folder of links to `dirs`; its wall time."""
    with tempfile.TemporaryDirectory(prefix="solbench_throughput_") as tmp:
        for folder in dirs:  # copies: problem discovery does not follow links
            shutil.copytree(folder, Path(tmp) / folder.name)
        command = [sys.executable, "-m", "solbench", "run", tmp, "--max-workloads", str(args.max_workloads),
                   "--device", args.device, "-o", str(traces), *extra]
        started = time.monotonic()
        result = subprocess.run(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")})
        wall = time.monotonic() - started
    if result.returncode not in (0, 1):
        print(result.stderr[-3000:], file=sys.stderr)
    return wall


ROW_KEYS = frozenset({"problem", "axes", "status", "seconds", "gpu_timed", "latency_ms", "phases"})


def rows_of(traces: Path) -> list[dict]:
    rows = []
    for line in traces.read_text().splitlines():
        trace = json.loads(line)
        evaluation = trace["evaluation"]
        phases = evaluation.get("phases_s") or {}
        axes = ",".join(f"{k}={v}" for k, v in trace["workload"].get("axes", {}).items())
        latency = (evaluation.get("performance") or {}).get("latency_ms")
        rows.append({"problem": trace["definition"], "axes": axes, "status": evaluation["status"],
                     "seconds": evaluation.get("seconds") or 0.0, "gpu_timed": phases.get("gpu_timed", 0.0),
                     "latency_ms": latency, "phases": phases})
    return rows


# What a workload's seconds / timed GPU seconds cannot go below while the checks stay as they are, even with
# every other part of the harness free: the timed loop itself (the timed calls plus what each call needs:
# fresh inputs drawn for it, the cache flush, the launch hold, the settle of short calls), and then the
# correctness checks (trials; judging the trials and the sampled timed outputs against the reference).
TARGET_RATIO = 1.5
FLOOR_PARTS = (("the timed loop alone", ("timing.loop",)),
               ("the timed loop and the correctness checks", ("timing.loop", "trials", "judge")))


def long_call_rows(rows: list[dict]) -> list[dict]:
    """The workloads the ratio target is about: timed, with calls of a millisecond or more."""
    return [r for r in rows if r["gpu_timed"] and (r["latency_ms"] or 0) >= 1.0]


def ratio_floor(rows: list[dict], parts: tuple[str, ...]) -> list[float]:
    """Per workload of a millisecond or more: the seconds of `parts` over the timed GPU seconds."""
    return [sum(r["phases"].get(p, 0.0) for p in parts) / r["gpu_timed"] for r in long_call_rows(rows)]


def print_table(rows: list[dict], wall: float) -> None:
    head = f"{'problem':34} {'axes':22} {'status':8} {'s':>6} {'gpu':>6} {'s/gpu':>6} " + " ".join(
        f"{SHORT.get(p, p)[:6]:>6}" for p in PHASES)
    print(head)
    for r in rows:
        ratio = r["seconds"] / r["gpu_timed"] if r["gpu_timed"] else float("nan")
        print(f"{r['problem'][:34]:34} {r['axes'][:22]:22} {r['status'][:8]:8} {r['seconds']:6.2f} "
              f"{r['gpu_timed']:6.2f} {ratio:6.2f} " + " ".join(f"{r['phases'].get(p, 0.0):6.2f}" for p in PHASES))
    total = sum(r["seconds"] for r in rows)
    sums = {p: sum(r["phases"].get(p, 0.0) for r in rows) for p in PHASES}
    print(f"{'sum':34} {'':22} {'':8} {total:6.1f} {sum(r['gpu_timed'] for r in rows):6.1f} {'':6} "
          + " ".join(f"{sums[p]:6.1f}" for p in PHASES))
    if total > 0:  # the same sums as shares of the workloads' seconds: where the cold run's time goes
        print("share of the workloads' seconds: " + ", ".join(
            f"{SHORT.get(p, p)} {sums[p] / total:.0%}" for p in sorted(PHASES, key=lambda p: -sums[p])
            if sums[p] >= 0.005 * total and p != "timing.inputs_in_loop")  # that one is a part of warm-up and loop
            + f"; timed calls (gpu_timed) {sum(r['gpu_timed'] for r in rows) / total:.0%}")
    details = {k: sum(r["phases"].get(k, 0.0) for r in rows) for k in sorted({k for r in rows for k in r["phases"]})
               if k.startswith("judge.")}
    if details:  # inside `judge`: the reference worker's own parts and the CUDA IPC transfer requests
        print("inside judge: " + ", ".join(f"{k[len('judge.'):]} {v:.1f}" for k, v in details.items()))
    passed = sum(r["status"] == "PASSED" for r in rows)
    print(f"\n{len(rows)} workloads, {passed} PASSED; wall {wall:.1f} s (workloads {total:.1f} s, outside them "
          f"{wall - total:.1f} s)")
    long = long_call_rows(rows)
    if long:
        ratios = [r["seconds"] / r["gpu_timed"] for r in long]
        print(f"workloads >= 1 ms: {len(long)}; seconds / timed GPU seconds: median {statistics.median(ratios):.2f}, "
              f"max {max(ratios):.2f} (target <= {TARGET_RATIO})")
        # The same overhead in seconds: what the checks cost per workload, whatever the call's length (a ratio
        # rewards timing longer; this does not).
        beyond = [r["seconds"] - r["gpu_timed"] for r in long]
        print(f"workloads >= 1 ms: seconds beyond the timed GPU seconds: median {statistics.median(beyond):.2f} s, "
              f"max {max(beyond):.2f} s")
        for label, parts in FLOOR_PARTS:
            floor = ratio_floor(rows, parts)
            print(f"  floor from {label}: median {statistics.median(floor):.2f}, "
                  f"{sum(x > TARGET_RATIO for x in floor)} of {len(floor)} over {TARGET_RATIO}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", help="problem folders (default: the 10 shared problems of issue 15)")
    parser.add_argument("--max-workloads", type=int, default=4)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=Path, help="write the rows and the wall time here")
    parser.add_argument("--before", type=Path, help="a --json of an earlier run: print the two side by side")
    parser.add_argument("--traces", type=Path, help="keep the traces here (default: a temporary file)")
    parser.add_argument("--from-json", type=Path, help="print the table of an earlier --json instead of running")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    if args.from_json:
        try:
            saved = json.loads(args.from_json.read_text())
            rows, wall = saved["rows"], float(saved["wall_s"])
            if not all(isinstance(r, dict) and ROW_KEYS <= r.keys() for r in rows):
                raise ValueError(f"every row needs {sorted(ROW_KEYS)}")
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise SystemExit(f"--from-json {args.from_json}: not a --json file of this script ({exc})") from None
        print_table(rows, wall)
        return 0
    dirs = problem_dirs(args.problems)
    with tempfile.TemporaryDirectory() as tmp:
        traces = args.traces or Path(tmp) / "traces.jsonl"
        if traces.exists():
            traces.unlink()
        wall = run(dirs, args, extra, traces)
        rows = rows_of(traces) if traces.exists() else []
    print_table(rows, wall)
    if args.json:
        args.json.write_text(json.dumps({"wall_s": wall, "rows": rows}, indent=1))
    if args.before:
        before = json.loads(args.before.read_text())
        print(f"\nbefore: wall {before['wall_s']:.1f} s, {sum(r['status'] == 'PASSED' for r in before['rows'])}/"
              f"{len(before['rows'])} PASSED; after: wall {wall:.1f} s, "
              f"{sum(r['status'] == 'PASSED' for r in rows)}/{len(rows)} PASSED")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
