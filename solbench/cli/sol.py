"""`solbench sol PROBLEM`: speed-of-light analysis of every workload of a problem (no GPU needed)."""

from __future__ import annotations

import json
import multiprocessing
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

from solbench.orchestrator.config import DEFAULT_SOL_HW, RunConfig, cuda_available, sol_hardware
from solbench.orchestrator.jobs import make_job
from solbench.report.table import fitted, output_console, rows_table
from solbench.sol.hardware import HardwareSpec, detect_spec
from solbench.spec.errors import SpecError
from solbench.spec.problem import discover_problems, load_problem
from solbench.spec.solution import load_solution

EXIT_OK, EXIT_NO_BOUND, EXIT_BAD_INPUT = 0, 1, 2  # 1: some workload has an operator the analyser cannot price
CONVENTIONS = ("strict", "solar")  # solbench.sol.analyser.CONVENTIONS, without importing torch to build --help


def register(subparsers) -> None:
    p = subparsers.add_parser("sol", help="speed-of-light bounds (FLOPs, bytes, T_SOL) of a problem's workloads")
    p.add_argument("problem", type=Path, help="problem folder (definition.json + workload.jsonl), "
                                              "or a folder of problems")
    p.add_argument("--hw", help=f"hardware spec (default: the running GPU; without one, the --solution's "
                                f"target_hardware, else {DEFAULT_SOL_HW})")
    p.add_argument("--solution", type=Path, help="a solution file whose target_hardware names the GPU to show "
                                                 "bounds for where no GPU is running and no --hw is given")
    p.add_argument("--convention", choices=CONVENTIONS, default="strict",
                   help="convention shown in the table (--json gives both)")
    p.add_argument("--json", action="store_true", help="one JSON record per workload")
    p.add_argument("--max-workloads", type=int, help="only the first N workloads")
    p.add_argument("--jobs", type=int, default=1, help="analyse N problems at once in separate processes")
    p.add_argument("--no-cache", action="store_true",
                   help="recompute every analysis (default: reuse $SOLBENCH_SOL_CACHE or ~/.cache/solbench/sol)")
    p.set_defaults(func=sol_command)


def pick_hardware(name: str | None, err: Console, target_hardware: Sequence[str] = ()) -> HardwareSpec:
    """--hw NAME, else the running GPU, else the solution's target GPU or B200 (said on stderr): the choice
    `solbench run` makes (`orchestrator.config.sol_hardware`)."""
    on_gpu = not name and cuda_available()
    running = detect_spec() if on_gpu else None  # a GPU without a spec is an error, never a guess
    hw = sol_hardware(name, running, on_gpu, target_hardware)
    if not name and not on_gpu:
        err.print(f"no GPU detected; using {hw.name} (pass --hw NAME to choose)")
    return hw


def workload_record(problem, workload, hw: HardwareSpec, use_cache: bool = True) -> dict:
    # torch (the analyser traces the reference): imported when a command needs it, not at start-up
    from solbench.sol.analyser import analyse, sol_time_ms
    from solbench.sol.cache import cached_analyse  # see above
    from solbench.sol.reject import min_possible_time_ms  # see above

    record = {"definition": problem.name, "uuid": workload.uuid, "axes": dict(workload.axes), "hw": hw.name}
    for convention in CONVENTIONS:
        cost = (cached_analyse if use_cache else analyse)(problem.definition, workload.axes,
                                                          convention=convention, scalars=workload.scalar_values())
        bound = sol_time_ms(cost, hw)
        record[convention] = {
            "flops_matmul": cost.flops_matmul, "flops_other": cost.flops_other, "bytes": cost.bytes_min,
            "t_sol_ms": None if cost.unavailable else bound.t_sol_ms, "bound": bound.binding,
            "intensity": bound.arithmetic_intensity,
        }
        if convention == "strict":
            record["method"] = cost.method
            record["unavailable"] = cost.unavailable  # operators not priced: no bound, never a silent zero
            record["unknown_ops"] = cost.unknown_ops
            record["notes"] = cost.notes
            record["t_min_possible_ms"] = min_possible_time_ms(cost, hw)
    return record


def sol_command(args) -> int:
    err = Console(stderr=True, soft_wrap=True)  # lines never broken at 80 columns in a log
    try:
        paths = discover_problems(args.problem) if args.problem.is_dir() else [args.problem]
        if not paths:
            raise SpecError(f"no problems under {args.problem}")
        problems = [load_problem(p) for p in paths]
        RunConfig(max_workloads=args.max_workloads)  # the limit is checked where it lives
        target = load_solution(args.solution).spec.target_hardware if args.solution else ()
        hw = pick_hardware(args.hw, err, target)
    except SpecError as exc:
        err.print(f"[red]error:[/red] {exc}")
        return EXIT_BAD_INPUT
    if args.jobs < 1:
        err.print("[red]error:[/red] --jobs must be at least 1")
        return EXIT_BAD_INPUT
    tasks = [(path, args.max_workloads, hw, not args.no_cache) for path in paths]
    if args.jobs == 1 or len(tasks) == 1:
        complete = _emit(args, problems, map(_problem_records, tasks), hw, err)
    else:
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            complete = _emit(args, problems, pool.map(_problem_records, tasks), hw, err)
    return EXIT_OK if complete else EXIT_NO_BOUND


def _emit(args, problems, results, hw: HardwareSpec, err: Console) -> bool:
    """Each problem's records, in problem order, as soon as they are ready; False when some workload
    has no bound (one error line per problem names its operators)."""
    complete = True
    for problem, records in zip(problems, results):
        missing = sorted({op for r in records if r.get("unavailable") for op in _unpriced(r)})
        if missing:
            complete = False
            err.print(f"[red]error:[/red] {problem.name}: no speed-of-light bound for "
                      f"{sum(1 for r in records if r.get('unavailable'))} of {len(records)} workloads: "
                      f"operator(s) not priced: {', '.join(missing)}")
        if args.json:
            for r in records:
                sys.stdout.write(json.dumps(r) + "\n")
            sys.stdout.flush()
        else:
            print_table(problem, records, hw, args.convention)
    return complete


def _unpriced(record: dict) -> list[str]:
    return [op.split(" (x")[0] for op in record["unknown_ops"] if not op.startswith("<untraced")]


def _problem_records(task: tuple) -> list[dict]:
    """Every workload record of one problem (a unit of work for --jobs)."""
    path, max_workloads, hw, use_cache = task
    problem = load_problem(path)
    return [workload_record(problem, w, hw, use_cache) for w in make_job(problem, None, max_workloads).workloads]


SOL_DROP_ORDER = ("method", "other ms", "uuid", "FLOP/B", "other GFLOP", "matmul GFLOP", "#", "bound")


def sol_table(title: str, records: list[dict], conv: str, leave_out: frozenset[str] = frozenset()) -> Table:
    """One row per workload; the columns in `leave_out` are not shown (`fitted` picks them)."""
    other_conv = "solar" if conv == "strict" else "strict"
    rows = []
    for i, r in enumerate(records):
        c, other = r[conv], r[other_conv]
        rows.append({"#": str(i), "uuid": r["uuid"][:8], "axes": ", ".join(f"{k}={v}" for k, v in r["axes"].items()),
                     "matmul GFLOP": f"{sum(c['flops_matmul'].values()) / 1e9:.4g}",
                     "other GFLOP": f"{c['flops_other'] / 1e9:.4g}", "MB": f"{c['bytes'] / 1e6:.4g}",
                     "T_SOL ms": _ms(c["t_sol_ms"]),
                     "bound": c["bound"] if c["t_sol_ms"] is not None else "unavailable",
                     "FLOP/B": "-" if c["intensity"] is None else f"{c['intensity']:.1f}",
                     "other ms": _ms(other["t_sol_ms"]), "method": r["method"]})
    return rows_table(title, rows, ("#", "uuid", "axes", "matmul GFLOP", "other GFLOP", "MB", "T_SOL ms", "bound",
                                    "FLOP/B", "other ms", "method"), ("uuid", "axes", "bound", "method"),
                      leave_out, headers={"other ms": f"{other_conv} ms"})


def print_table(problem, records: list[dict], hw: HardwareSpec, conv: str) -> None:
    console = output_console()
    title = f"{problem.name}: speed of light on {hw.name} ({conv} convention)"
    console.print(fitted(console, lambda leave_out: sol_table(title, records, conv, leave_out), SOL_DROP_ORDER))
    unknown = sorted({u for r in records for u in r["unknown_ops"]})
    notes = sorted({n for r in records for n in r["notes"]})
    if unknown:
        console.print(f"[yellow]not priced:[/yellow] {', '.join(unknown)}")
    for note in notes[:10]:
        console.print(f"[yellow]note:[/yellow] {note}")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
