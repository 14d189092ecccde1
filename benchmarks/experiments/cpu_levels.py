"""Can this machine time a short CPU call against itself at all? The same reference in two plain processes,
no solbench.

    python benchmarks/experiments/cpu_levels.py                       # layernorm and rmsnorm, calls < 0.5 ms
    python benchmarks/experiments/cpu_levels.py --repeats 12 problem_defs/core/rmsnorm_h4096

Issue 48 asks, on a 2-core machine, for the reference timed against itself to read 0.8-1.25x on every
workload, and for solbench's median to be within 2x of a plain loop's. On calls of 20-500 us solbench has
missed both now and then. This asks whether a harness could meet them here: two processes (the shape of
solbench's two workers, nothing of solbench's between calls) each load the problem's reference, pin
themselves to one core (the same one, as solbench's workers do), run one intra-op thread with the workers'
allocator settings, and time single calls on inputs redrawn in place before each (`normal_`), by solbench's
CPU clock (the process's CPU time over the call, or its wall time if less). The parent alternates them in
solbench's CPU rounds per side (6) of `--round-ms` of calls each, and takes solbench's paired speedup:
the median over the rounds of A's round median over B's. Repeated `--repeats` times per workload, one
right after the other. It prints, per workload, the speedups (A and B run the same code), how many fall
outside 0.8-1.25x, and the spread of A's pooled median over the repeats: how far one measurement of the
same call moves from the next on this machine, seconds apart, with no harness at all.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from cpu_timing_check import allocate_as_workers_do  # noqa: E402

from solbench.orchestrator.timed import CPU_ROUNDS  # noqa: E402 - solbench's CPU rounds per side
from solbench.timing.stats import paired_speedup  # noqa: E402


def timer_process(connection, problem_dir: str, workload_index: int, core: int) -> None:
    """One side: load the reference and its inputs, then answer each round request with that round's
    single-call samples (ms)."""
    os.sched_setaffinity(0, {core})
    import torch

    from solbench.inputs.generate import make_inputs
    from solbench.spec.problem import check_workload, load_problem
    from solbench.worker.calls import load_reference_module

    torch.set_num_threads(1)
    problem = load_problem(problem_dir)
    run = load_reference_module(problem.definition.reference).run
    workload = problem.workloads[workload_index]
    axes = check_workload(problem.definition, workload)
    inputs = make_inputs(problem.definition, workload, axes, seed=0, device="cpu", data_roots=[problem.directory])
    floats = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
    gc.disable()
    with torch.no_grad():
        while True:
            request = connection.recv()
            if request is None:
                return
            samples, until = [], time.perf_counter() + request / 1e3
            while time.perf_counter() < until or len(samples) < 10:
                for tensor in floats:
                    tensor.normal_()
                c0, t0 = time.process_time_ns(), time.perf_counter_ns()
                run(*inputs)
                t1, c1 = time.perf_counter_ns(), time.process_time_ns()
                samples.append(min(t1 - t0, c1 - c0) / 1e6)
            connection.send(samples)


def one_measurement(sides, round_ms: float) -> tuple[float, float, float]:
    """Six alternating rounds per side: (paired speedup A/B, A's pooled median, B's pooled median)."""
    rounds: list[list[list[float]]] = [[], []]
    for _ in range(CPU_ROUNDS):
        for k, side in enumerate(sides):
            side.send(round_ms)
            rounds[k].append(side.recv())
    pooled = [statistics.median([s for r in side_rounds for s in r]) for side_rounds in rounds]
    return paired_speedup(rounds[0], rounds[1]), pooled[0], pooled[1]


def short_workloads(problem_dir: str, below_ms: float) -> list[tuple[int, str, float]]:
    """(index, axes, a quick single-call median in ms) of the workloads whose call is under `below_ms`."""
    import torch

    from solbench.inputs.generate import make_inputs
    from solbench.spec.problem import check_workload, load_problem
    from solbench.worker.calls import load_reference_module

    torch.set_num_threads(1)
    problem = load_problem(problem_dir)
    run = load_reference_module(problem.definition.reference).run
    found = []
    for index, workload in enumerate(problem.workloads):
        axes = check_workload(problem.definition, workload)
        inputs = make_inputs(problem.definition, workload, axes, seed=0, device="cpu", data_roots=[problem.directory])
        times = []
        for _ in range(20):
            started = time.perf_counter()
            run(*inputs)
            times.append((time.perf_counter() - started) * 1e3)
        if statistics.median(times) < below_ms:
            found.append((index, ",".join(f"{k}={v}" for k, v in workload.axes.items()), statistics.median(times)))
    return found


def main() -> int:
    allocate_as_workers_do()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", default=[str(ROOT / "problem_defs/core/layernorm_fp32_h1024"),
                                                         str(ROOT / "problem_defs/core/rmsnorm_h4096")])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--round-ms", type=float, default=80.0, help="calls per round, in wall ms (at least 10)")
    parser.add_argument("--below-ms", type=float, default=0.5, help="only workloads whose call is shorter")
    args = parser.parse_args()
    core = max(os.sched_getaffinity(0))  # solbench's workers claim the highest free core first
    context = multiprocessing.get_context("spawn")
    outside_total = measured = 0
    print(f"{'problem':24} {'axes':16} {'call ms':>8}  speedups (A and B the same code)          outside  "
          f"A's median over the repeats: min-max (max/min)")
    for problem_dir in args.problems:
        for index, axes, call_ms in short_workloads(problem_dir, args.below_ms):
            pipes = [context.Pipe() for _ in range(2)]
            processes = [context.Process(target=timer_process, args=(child, problem_dir, index, core), daemon=True)
                         for _, child in pipes]
            for process in processes:
                process.start()
            sides = [parent for parent, _ in pipes]
            one_measurement(sides, args.round_ms)  # warm: imports, allocator, caches
            results = [one_measurement(sides, args.round_ms) for _ in range(args.repeats)]
            for side in sides:
                side.send(None)
            for process in processes:
                process.join(10)
            speedups = [r[0] for r in results]
            medians_a = [r[1] for r in results]
            outside = sum(not 0.8 <= s <= 1.25 for s in speedups)
            outside_total += outside
            measured += len(speedups)
            print(f"{Path(problem_dir).name[:24]:24} {axes[:16]:16} {call_ms:8.4f}  "
                  f"{' '.join(f'{s:.2f}' for s in speedups):44} {outside:>3}/{len(speedups):<3}  "
                  f"{min(medians_a) * 1e3:.1f}-{max(medians_a) * 1e3:.1f} us ({max(medians_a) / min(medians_a):.2f}x)",
                  flush=True)
    print(f"\n{outside_total} of {measured} speedups outside 0.8-1.25x, with no harness between the calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
