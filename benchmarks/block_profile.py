"""Where a timed block's harness time goes, in process, on one device: the block's phases and a profile.

    python benchmarks/block_profile.py PROBLEM_DIR [--solution FILE] [--device cuda] [--blocks 6] [--top 30]
        [--worker] [--tree DIR]

Loads the reference (or `--solution`) the way a worker does, then runs `--blocks` timed blocks of the first
workload with the run's default timing settings (CUDA graphs, the escaped-work probe on the last block,
checked outputs), under cProfile. Prints each block's `phases_s` and the functions with the most cumulative
time; the timed loop's own entries stay in, for scale. Made to find what the end of a block costs on a GPU
(issue 31: `timing.checks`, `timing.release` and `timing.other` took 2.5 s more than fe9e8ce over issue 15's
40 workloads on an H200), where a worker process cannot be profiled from outside. No sandbox; the worker's guard (audit hook,
integrity snapshot) only with `--worker`, which also sends each request through the worker's `serve_one`
and prints the handler's seconds beside the block's phases (what they leave out is `timing.other`).

`--tree DIR` profiles another checkout's solbench instead (e.g. .gpu_data/fe9e8ce, for an A/B of the same
blocks); messages are built in whichever form that tree's protocol takes. For each probe block the script
also prints what the escaped-work probe's `finish` cost and how many CUPTI records it parsed: the end of a
block is mostly that (issue 31: 2.5 of the 2.7 s of `timing.checks` over issue 15's 40 workloads, H200).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import importlib
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", type=Path)
    parser.add_argument("--solution", type=Path, help="a solution file (default: the reference)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout whose solbench is profiled (default: this one)")
    parser.add_argument("--worker", action="store_true",
                        help="as a worker serves requests: its guard (audit hook, integrity snapshot) installed "
                             "first, each request through its `serve_one`, so the integrity check and memory "
                             "release after a block count too (its `release` phase, or `other` in older trees)")
    args = parser.parse_args()
    if not (args.tree / "solbench" / "__init__.py").is_file():  # else an installed solbench would be profiled instead
        parser.error(f"--tree {args.tree}: no solbench package there")
    return args


def request(cls, **fields):
    """`cls(**fields)` in the form this tree's protocol takes: older trees carry plain dicts where newer
    ones carry spec objects, and lack fields added since (those are dropped)."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for name, value in fields.items():
        if name not in known:
            continue
        wants_dict = str(known[name].type) == "dict"
        kwargs[name] = value.to_dict() if wants_dict and hasattr(value, "to_dict") else value
    return cls(**kwargs)


class FinishMeter:
    """Wraps the probe's `finish`: its seconds and the CUPTI records it parsed, per probe block."""

    def __init__(self, probe_class) -> None:
        self.rows: list[tuple[float, int, int]] = []
        original = probe_class.finish
        meter = self

        def finish(probe):
            collector = probe.collector
            started = time.perf_counter()
            result = original(probe)
            spent = time.perf_counter() - started
            meter.rows.append((spent, len(getattr(collector, "launches", [])), len(getattr(collector, "work", []))))
            return result

        probe_class.finish = finish


def main() -> int:
    args = parse_args()
    sys.path.insert(0, str(args.tree.resolve()))  # run from a checkout, no install needed
    RunConfig = importlib.import_module("solbench.orchestrator.config").RunConfig
    msg = importlib.import_module("solbench.protocol.messages")
    load_problem = importlib.import_module("solbench.spec.problem").load_problem
    solutions = importlib.import_module("solbench.spec.solution")
    calls = importlib.import_module("solbench.worker.calls")
    timed_block = importlib.import_module("solbench.worker.timed_block")
    WorkerState = importlib.import_module("solbench.worker.state").WorkerState
    meter = FinishMeter(importlib.import_module("solbench.worker.probe").EscapedWorkProbe)
    print(f"solbench from {Path(importlib.import_module('solbench').__file__).parent}")
    load_solution, reference_solution = solutions.load_solution, solutions.reference_solution

    try:  # a bad folder or solution file: one line, as the CLI says it (SpecError, whichever tree's)
        problem = load_problem(args.problem)
        solution = (load_solution(args.solution, problem.definition) if args.solution
                    else reference_solution(problem.definition))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"block_profile.py: {exc}") from None
    state = WorkerState(args.device)
    work_dir = tempfile.mkdtemp(prefix="solbench_block_profile_")
    if args.worker:
        worker_main = importlib.import_module("solbench.worker.main")
        guard, integrity = worker_main.start_guard(state, None)

        def serve(req):
            reply = worker_main.serve_one(state, guard, integrity, req)
            if isinstance(reply, msg.Failed):
                raise SystemExit(f"{req.OP} failed: {reply.status}: {reply.log[:2000]}")
            return reply
    else:
        handlers = {"load": calls.handle_load, "call": calls.handle_call, "time": timed_block.handle_time}

        def serve(req):
            return handlers[req.OP](state, req)
    serve(request(msg.Load, definition=problem.definition, solution=solution, work_dir=work_dir))
    workload = problem.workloads[0]
    serve(request(msg.Call, workload=workload, seed=1))  # as the trials do first
    timing = RunConfig(device=args.device).timing_config(args.device)

    def block(k: int):
        last = k == args.blocks - 1
        return serve(request(msg.Time, workload=workload, seeds=[11, 12], config=timing, checked_outputs=2,
                             probe=last and state.is_cuda, block_key=1000 + k))

    block(0)  # warm: first captures, lazy initialisation
    profile = cProfile.Profile()
    profile.enable()
    replies = [block(k) for k in range(args.blocks)]
    profile.disable()
    for k, reply in enumerate(replies):
        phases = getattr(reply, "phases_s", {})
        print(f"block {k}: {len(reply.samples_ms)} samples, phases_s {phases}")
        if args.worker:  # what the block's phases leave out of the request's handler time
            named = sum(v for name, v in phases.items() if name != "inputs_in_loop")
            print(f"  handler {reply.handler_s:.4f} s, other {reply.handler_s - named:.4f} s")
    for spent_s, launches, work in meter.rows:
        print(f"probe finish: {spent_s * 1e3:.1f} ms, {launches} API records, {work} GPU records")
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(args.top)
    print(text.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
