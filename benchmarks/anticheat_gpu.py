"""One-shot run of the whole anti-cheat suite (hostile and legitimate solutions) on a GPU.

    python benchmarks/anticheat_gpu.py                 # every case on cuda:0
    python benchmarks/anticheat_gpu.py --device cpu    # the same table on CPU (GPU-only cases skipped)

Prints one row per solution: its kind, the status of each workload, the expected status, and the
first line of the log (which defence caught it); then the counts. Exit status 1 when any row
differs from its expectation (a hostile solution PASSED, or a legitimate one did not).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.anticheat.suite import discover, fast_config, run_cases, write_problem  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--devices", nargs="*", help="spread the cases over these devices (e.g. cuda:0 cuda:1)")
    parser.add_argument("--only", nargs="*", help="case names to run (default: all)")
    parser.add_argument("--workloads", type=int, default=2, help="workloads per case (default 2)")
    args = parser.parse_args()
    on_gpu = args.device.startswith("cuda")
    cases = [c for c in discover() if (on_gpu or not c.gpu) and (not args.only or c.name in args.only)]
    config = fast_config(args.device)
    config.max_workloads = args.workloads
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="solbench_anticheat_") as root:
        def progress(case_id: str, trace) -> None:  # one line per workload as it ends: a cut run still says something
            first = trace.evaluation.log.strip().splitlines()[0][:100] if trace.evaluation.log.strip() else ""
            print(f"  {time.time() - started:5.0f}s {case_id:<46} {trace.status!s:<20} {first}", flush=True)

        results = run_cases(cases, write_problem(Path(root)), args.device, config=config, devices=args.devices,
                            on_trace=progress)
    wrong = 0
    cupti_notes = set()
    print(f"{'solution':<38} {'kind':<8} {'statuses':<40} {'expected':<20} ok  caught by")
    for case in cases:
        traces = results[case.id]
        statuses = [str(t.status) for t in traces]
        ok = bool(traces) and all(s in case.allowed for s in statuses)
        wrong += not ok
        log = traces[0].evaluation.log.strip().splitlines()[0][:90] if traces and traces[0].evaluation.log.strip() else ""
        for t in traces:
            cupti_notes.update(w for w in t.evaluation.warnings if "cupti" in w)
        print(f"{case.name:<38} {case.kind:<8} {','.join(statuses):<40} {case.expect:<20} "
              f"{'yes' if ok else 'NO ':<3} {log}")
    hostile = [c for c in cases if c.kind == "hostile"]
    legit = [c for c in cases if c.kind == "legit"]
    print(f"\n{len(hostile)} hostile, {len(legit)} legitimate, {wrong} not as expected, "
          f"{time.time() - started:.0f} s on {', '.join(args.devices or [args.device])}")
    if on_gpu:
        print("cupti:", "; ".join(sorted(cupti_notes)) or "used (no 'unavailable' note in any trace)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
