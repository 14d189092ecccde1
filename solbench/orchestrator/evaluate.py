"""Evaluate one solution on one problem, workload by workload, on one device.

The orchestrator never imports solution code. A reference worker and a solution worker regenerate
identical inputs from secret seeds; only outputs come back here, where they are judged. Each finished
workload becomes a `Trace` at once, so a crash later loses nothing. One workload: load both workers
(`session`), correctness trials (`trials`), timed blocks (`timed`), then the speed-of-light record and
the trace (`verdict`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence

from solbench.check.anticheat import ProblemFiles
from solbench.check.static_scan import scan_solution
from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.session import DeviceSession, StepFailed
from solbench.orchestrator.timed import time_baselines, time_rounds
from solbench.orchestrator.trials import run_trials
from solbench.orchestrator.verdict import (
    WorkloadEnded,
    WorkloadRun,
    launch_and_busy_ms,
    make_trace,
    speed_of_light,
)
from solbench.spec.problem import Problem
from solbench.spec.solution import Solution, reference_solution
from solbench.spec.trace import Correctness, Performance, Status, Trace
from solbench.spec.workload import Workload
from solbench.timing.stats import summarize


def evaluate_problem(session: DeviceSession, problem: Problem, solution: Solution | None, config: RunConfig,
                     workloads: Sequence[Workload] | None = None, *, skip: Callable[[Workload], bool] | None = None,
                     run_seed: int | None = None) -> Iterator[Trace]:
    """Yield one trace per workload (default: all of the problem's; the reference is the solution when
    none is given)."""
    solution = solution or reference_solution(problem.definition)
    run_seed = run_seed if run_seed is not None else (config.seed if config.seed is not None
                                                      else random.SystemRandom().getrandbits(62))
    workloads = list(problem.workloads if workloads is None else workloads)
    warnings = scan_solution(solution)
    session.runtime_warnings = []
    files = ProblemFiles(problem.directory)  # a solution must leave the problem folder as it found it
    reference_hash = reference_solution(problem.definition).content_hash()
    for trace in _evaluate_workloads(session, problem, solution, config, workloads, skip, run_seed, warnings):
        changed = files.changes()
        if changed and trace.solution_hash != reference_hash:
            session.retire(session.candidate)
            trace.evaluation.status = Status.REWARD_HACK
            trace.evaluation.performance = None
            trace.evaluation.log = (f"the solution changed the problem folder {problem.directory}: {changed[:10]}\n"
                                    + trace.evaluation.log)[-16000:]
        yield trace


def _evaluate_workloads(session: DeviceSession, problem: Problem, solution: Solution, config: RunConfig,
                        workloads: list[Workload], skip, run_seed: int, warnings: list[str]) -> Iterator[Trace]:
    session.prestart()
    if session.analysis is not None:
        session.costs = {w.uuid: session.analysis.submit(problem.definition, w.axes, w.scalar_values())
                         for w in workloads if not (skip and skip(w))}
    load_failure: StepFailed | None = None
    for workload in workloads:
        if skip is not None and skip(workload):
            continue
        started = time.monotonic()

        def trace(status: Status, log: str, _workload=workload, _started=started) -> Trace:
            return make_trace(problem, solution, _workload, session, status, log, started=_started, warnings=warnings)

        if load_failure is not None:
            yield trace(load_failure.status, load_failure.log)
            continue
        try:
            session.load(session.reference, problem, reference_solution(problem.definition))
        except StepFailed as exc:
            yield trace(Status.INVALID_REFERENCE, f"the reference could not be loaded: {exc.log}")
            continue
        try:
            session.load(session.candidate, problem, solution)
        except StepFailed as exc:
            load_failure = exc if exc.status in (Status.COMPILE_ERROR, Status.SKIPPED, Status.REWARD_HACK) else None
            yield trace(exc.status, exc.log)
            continue
        try:
            yield evaluate_workload(session, problem, solution, workload, config, run_seed, started, warnings)
        except StepFailed as exc:
            yield trace(exc.status, exc.log)


def evaluate_workload(session: DeviceSession, problem: Problem, solution: Solution, workload: Workload,
                      config: RunConfig, run_seed: int, started: float, warnings: list[str]) -> Trace:
    """Trials, timed blocks, baselines and the speed-of-light record of one workload."""
    run = WorkloadRun(session, problem, solution, workload, config, run_seed, started, warnings)
    try:
        correctness, reference_aliases = run_trials(run)
        samples = time_rounds(run, reference_aliases, correctness)
    except WorkloadEnded as ended:
        return ended.trace
    return _finish(run, correctness, samples)


def _finish(run: WorkloadRun, correctness: Correctness, samples) -> Trace:
    """Latency statistics, baselines, the speed-of-light record and the trace of a workload that passed."""
    session, config = run.session, run.config
    target = run.config.timing_config(session.device).target_rel_ci
    method = "cuda_events" if session.device.startswith("cuda") else "cpu_clock"
    last = samples.last_reply
    latency = summarize(samples.candidate_ms, warmup=last.warmup if last else 0, method=method, target_rel_ci=target)
    latency.flags = sorted(set(latency.flags) | samples.flags)
    reference_latency = (summarize(samples.reference_ms, method=method, target_rel_ci=target)
                         if samples.reference_ms else None)
    speedup = (reference_latency.median_ms / latency.median_ms
               if reference_latency and latency.median_ms > 0 else None)
    if speedup is not None and method == "cpu_clock":  # the CPU's speed shifts between rounds
        speedup = samples.paired_speedup() or speedup
    performance = Performance(latency.median_ms, reference_latency.median_ms if reference_latency else None,
                              speedup, latency, reference_latency, *launch_and_busy_ms(samples.host_ms, samples.probes))
    cupti_failures = sorted({str(p.get("cupti"))[:200] for p in samples.probes
                             if str(p.get("cupti", "")).startswith("failed")})
    if cupti_failures:
        run.warnings.append(f"CUPTI {cupti_failures[0]}: no GPU-busy time, escaped work checked by "
                            f"synchronisation only")
    clocks = (last.clocks_before, last.clocks_after) if last else (None, None)
    session.add_phase("gpu_timed", (sum(samples.candidate_ms) + sum(samples.reference_ms)) / 1e3)
    baselines = time_baselines(run, performance.reference_latency_ms, method)
    measured = [t for t in baselines.values() if t]
    sol, impossible, notes = speed_of_light(session, run.problem, run.workload, config, latency.median_ms,
                                            min(measured) if measured else None, run.solution.spec.target_hardware)
    if sol is not None:
        sol["baselines_ms"] = baselines  # T_b is the fastest of these
    run.warnings.extend(notes)
    status = Status.REWARD_HACK if impossible else Status.PASSED
    return run.trace(status, impossible or "", correctness=correctness, performance=performance, clocks=clocks, sol=sol)
