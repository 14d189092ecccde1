"""Runs of the anti-cheat suite (hostile and legitimate solutions) on a GPU, once or repeatedly.

    python benchmarks/anticheat_gpu.py                 # every case on cuda:0
    python benchmarks/anticheat_gpu.py --device cpu    # the same table on CPU (GPU-only cases skipped)
    python benchmarks/anticheat_gpu.py --repeat 10 --only side_stream_capture_breaker side_stream_dodges_probe
    python benchmarks/anticheat_gpu.py --serve         # every case submitted to a `solbench serve` (issue 35)
    python benchmarks/anticheat_gpu.py --part 1/2      # every other case: the suite in two device calls

Prints one row per solution: its kind, the status of each workload, the expected status, and the
first line of the log (which defence caught it); then the counts. With `--repeat N` every selected
case is evaluated N times, each time in a fresh scheduler run (new workers, new input seeds), and a
second table gives per case the runs, how many were as expected (caught: no workload PASSED and every
status allowed, for hostile cases; passed: every workload PASSED, for legitimate ones), how many runs
let a hostile case pass at least one workload, and the statuses seen. Detection that depends on luck
(timing of a probe, which workload) shows up there as a count below N.

With `--serve`, a `solbench serve` on the device is started once and every case is submitted to it (the
problem copy by path, the solution by content, the same settings); the table is the same, and so is what
counts as expected.

Exit status 1 when any run differs from its expectation (a hostile solution PASSED, or a legitimate
one did not).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solbench import api  # noqa: E402
from solbench.serve.process import ServiceProcess  # noqa: E402
from tests.anticheat.served import submit_cases  # noqa: E402
from tests.anticheat.suite import (  # noqa: E402
    Case,
    discover,
    fast_config,
    missing_flags,
    missing_needs,
    run_cases,
    write_problem,
)


@dataclass
class Tally:
    """What `--repeat` saw of one case over its runs."""

    runs: int = 0
    as_expected: int = 0
    passed_some: int = 0  # runs in which at least one workload PASSED
    statuses: Counter = field(default_factory=Counter)  # per workload
    first_logs: Counter = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)  # of PASSED workloads


def first_log_line(trace, width: int = 90) -> str:
    log = trace.evaluation.log.strip()
    return log.splitlines()[0][:width] if log else ""


def as_expected(case: Case, traces, device: str = "cuda") -> bool:
    return bool(traces) and all(str(t.status) in case.allowed for t in traces) and not missing_flags(case, traces, device)


def one_run(cases: list[Case], args, started: float, label: str) -> dict[str, list]:
    config = fast_config(args.device)
    config.max_workloads = args.workloads
    with tempfile.TemporaryDirectory(prefix="solbench_anticheat_") as root:
        def progress(case_id: str, trace) -> None:  # one line per workload as it ends: a cut run still says something
            print(f"  {label}{time.time() - started:5.0f}s {case_id:<46} {trace.status!s:<20} {first_log_line(trace, 100)}",
                  flush=True)

        if args.client is not None:
            return submit_cases(cases, Path(root), args.client, args.device, config=config, on_trace=progress)
        return run_cases(cases, write_problem(Path(root)), args.device, config=config, devices=args.devices,
                         on_trace=progress)


def print_run(cases: list[Case], results: dict[str, list], device: str) -> int:
    wrong = 0
    print(f"{'solution':<38} {'kind':<8} {'statuses':<40} {'expected':<20} ok  caught by")
    for case in cases:
        traces = results[case.id]
        statuses = [str(t.status) for t in traces]
        ok = as_expected(case, traces, device)
        wrong += not ok
        unexpected = [t for t in traces if str(t.status) not in case.allowed]
        # a wrong verdict is shown whole (which program, which output): that is what one fixes from
        log = first_log_line(unexpected[0], width=600) if unexpected else first_log_line(traces[0]) if traces else ""
        print(f"{case.name:<38} {case.kind:<8} {','.join(statuses):<40} {case.expect:<20} "
              f"{'yes' if ok else 'NO ':<3} {log}")
    return wrong


def latency_ms(trace) -> float | None:
    perf = trace.evaluation.performance
    return perf.latency_ms if perf is not None else None


def print_tallies(cases: list[Case], tallies: dict[str, Tally]) -> None:
    print(f"\n{'case':<38} {'kind':<8} {'expected':<20} {'runs':>4} {'ok':>4} {'passed>=1':>9}  statuses seen "
          f"(per workload)  [PASSED latency ms: min-max]")
    for case in cases:
        t = tallies[case.id]
        seen = ", ".join(f"{s} x{n}" for s, n in sorted(t.statuses.items()))
        lat = (f"  [{min(t.latencies_ms):.4f}-{max(t.latencies_ms):.4f}]" if t.latencies_ms else "")
        print(f"{case.name:<38} {case.kind:<8} {case.expect:<20} {t.runs:>4} {t.as_expected:>4} {t.passed_some:>9}  "
              f"{seen}{lat}")
        if t.as_expected < t.runs:
            for line, n in t.first_logs.most_common(3):
                print(f"{'':<40}first log line x{n}: {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--devices", nargs="*", help="spread the cases over these devices (e.g. cuda:0 cuda:1)")
    parser.add_argument("--only", nargs="*", help="case names to run (default: all)")
    parser.add_argument("--workloads", type=int, default=2,
                        help="workloads per case (default 2; ac_rmsnorm cases always run all of theirs)")
    parser.add_argument("--repeat", type=int, default=1, help="evaluate every selected case this many times, "
                        "each in a fresh harness run, and print the per-case counts (default 1)")
    parser.add_argument("--serve", action="store_true", help="submit every case to a `solbench serve` on --device "
                                                              "(started once) instead of one harness run")
    parser.add_argument("--part", type=part_spec, help="K/N: only the K-th of N interleaved parts of the selected "
                        "cases (all N parts together are the suite, once): one GPU runs it in N device calls")
    args = parser.parse_args()
    if args.serve:
        with tempfile.TemporaryDirectory(prefix="solbench_anticheat_serve_") as folder:
            devices = ["--devices", ",".join(d.split(":")[1] for d in args.devices)] if args.devices else []
            with ServiceProcess(folder, "--device", args.device, *devices) as service:
                args.client = api.Client(service.url)
                return judge(args, parser)
    args.client = None
    return judge(args, parser)


def part_spec(text: str) -> tuple[int, int]:
    """"K/N" with 1 <= K <= N, for `--part`."""
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise argparse.ArgumentTypeError(f"not K/N with 1 <= K <= N: {text!r}")
    return int(k), int(n)


def in_part(cases: list[Case], part: tuple[int, int] | None) -> list[Case]:
    """Every N-th case from the K-th: interleaved, so that neighbours of one cost (the CUDA C++ builds, the
    language packages' cases) are spread over the parts."""
    if part is None:
        return cases
    k, n = part
    return cases[k - 1::n]


def judge(args, parser) -> int:
    """Every selected case, `--repeat` times; the tables; the exit status."""
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    on_gpu = args.device.startswith("cuda")
    cases = in_part([c for c in discover() if (on_gpu or not c.gpu) and (not args.only or c.name in args.only)],
                    args.part)
    skipped = {case.id: missing_needs(case) for case in cases}
    for case_id, reason in skipped.items():
        if reason:
            print(f"skipped {case_id}: {reason}")
    cases = [c for c in cases if not skipped[c.id]]
    unknown = sorted(set(args.only or []) - {c.name for c in discover()})
    if unknown:
        parser.error(f"no such case: {unknown}")
    started = time.time()
    tallies = {case.id: Tally() for case in cases}
    wrong_runs = 0
    cupti_notes: set[str] = set()
    for r in range(args.repeat):
        label = f"[{r + 1}/{args.repeat}] " if args.repeat > 1 else ""
        results = one_run(cases, args, started, label)
        if args.repeat > 1:
            print(f"-- run {r + 1} of {args.repeat}")
        wrong_runs += print_run(cases, results, args.device)
        for case in cases:
            traces, tally = results[case.id], tallies[case.id]
            tally.runs += 1
            tally.as_expected += as_expected(case, traces, args.device)
            tally.passed_some += any(str(t.status) == "PASSED" for t in traces)
            for t in traces:
                tally.statuses[str(t.status)] += 1
                tally.first_logs[first_log_line(t)] += 1
                if str(t.status) == "PASSED" and latency_ms(t) is not None:
                    tally.latencies_ms.append(latency_ms(t))
                cupti_notes.update(w for w in t.evaluation.warnings if "cupti" in w)
    if args.repeat > 1:
        print_tallies(cases, tallies)
    hostile = [c for c in cases if c.kind == "hostile"]
    legit = [c for c in cases if c.kind == "legit"]
    print(f"\n{len(hostile)} hostile, {len(legit)} legitimate, {args.repeat} run(s) each, {wrong_runs} case-runs not "
          f"as expected, {time.time() - started:.0f} s on {', '.join(args.devices or [args.device])}")
    if on_gpu:
        print("cupti:", "; ".join(sorted(cupti_notes)) or "used (no 'unavailable' note in any trace)")
    return 1 if wrong_runs else 0


if __name__ == "__main__":
    sys.exit(main())
