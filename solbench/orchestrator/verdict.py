"""The end of a workload: its speed-of-light record and faster-than-light check, the host and GPU-busy
figures beside the latency, and the `Trace` itself."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from datetime import UTC, datetime

from solbench.orchestrator.config import RunConfig, sol_hardware
from solbench.orchestrator.phases import is_part
from solbench.orchestrator.session import DeviceSession
from solbench.sol.analyser import analyse, sol_time_ms
from solbench.sol.hardware import detect_spec
from solbench.sol.record import sol_record
from solbench.sol.reject import faster_than_light
from solbench.spec.problem import Problem
from solbench.spec.sol_record import SolRecord
from solbench.spec.solution import Solution
from solbench.spec.trace import Correctness, Environment, Evaluation, Performance, Status, Trace
from solbench.spec.workload import Workload


def launch_and_busy_ms(host_samples: list[float], probes: list[dict]) -> tuple[float | None, ...]:
    """Median host launch time, and the CUPTI GPU-busy time (union of the call's GPU activity; the
    first-to-last span from workers that report no union) and kernel-time sum of the probe calls.

    These sit beside the latency (device time with the launch queued ahead, which the score uses):
    host time says whether the call is launch-bound on this CPU, GPU-busy time whether the event time
    holds idle gaps. Values from the solution's worker are plain numbers; anything else is dropped.
    """
    def median(values) -> float | None:
        nums = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0]
        return statistics.median(nums) if nums else None

    spans = [v for p in probes if p.get("cupti") == "used" for v in p.get("busy_ms") or p.get("span_ms") or []]
    kernels = [v for p in probes if p.get("cupti") == "used" for v in p.get("kernel_ms") or []]
    return median(host_samples), median(spans), median(kernels)


def speed_of_light(session: DeviceSession, problem: Problem, workload: Workload, config: RunConfig,
                   latency_ms: float, baseline_ms: float | None, target_hardware: tuple[str, ...] = ()) -> tuple[dict | None, str | None, list[str]]:
    """The trace's speed-of-light record, and a rejection message when the time is impossible.

    The record uses `--hw` when given (e.g. B200 bounds on any machine); rejection always uses the
    running GPU's own spec, since only that one bounds what was measured here.
    """
    notes: list[str] = []
    started = time.monotonic()
    try:
        future = session.costs.get(workload.uuid)
        cost = (future.result(timeout=300) if future is not None
                else analyse(problem.definition, workload.axes, scalars=workload.scalar_values()))
    except Exception as exc:  # noqa: BLE001 - an analysis gap must not lose the measurement
        return None, None, [f"speed-of-light analysis failed: {type(exc).__name__}: {exc}"]
    finally:
        session.add_phase("sol_analysis", time.monotonic() - started)
    running = None
    if session.device.startswith("cuda"):
        try:
            running = detect_spec(int(session.device.split(":")[1]) if ":" in session.device else 0)
        except Exception as exc:  # noqa: BLE001 - unknown GPU: say so, never guess
            notes.append(f"no hardware spec for this GPU ({exc}); no faster-than-light check")
    on_gpu = session.device.startswith("cuda")
    try:
        # With no GPU, the bound shown is --hw's or the problem's target GPU's, for scale: never a score
        hw = sol_hardware(config.hw, running, on_gpu, target_hardware)
    except Exception as exc:  # noqa: BLE001
        return None, None, notes + [f"hardware spec {config.hw!r}: {exc}"]
    impossible = faster_than_light(latency_ms, cost, running) if running is not None else None
    if hw is None:
        return None, impossible, notes
    if on_gpu:
        record = sol_record(cost, sol_time_ms(cost, hw), hw, latency_ms, baseline_ms)
    else:
        record = sol_record(cost, sol_time_ms(cost, hw), hw, None, None)
        record.update(latency_ms=latency_ms, t_baseline_ms=baseline_ms,
                      unscored=f"measured on the {session.device.upper()}: T_SOL is the bound on {hw.name}, "
                               f"not scored (a {session.device} time says nothing about a GPU's bound)",
                      hw_chosen_by="--hw" if config.hw else "target_hardware")
    if cost.unknown_ops:
        notes.append(f"speed-of-light analysis did not understand: {', '.join(cost.unknown_ops)}")
    return record, impossible, notes


def make_trace(problem: Problem, solution: Solution, workload: Workload, session: DeviceSession, status: Status,
               log: str, *, correctness: Correctness | None = None, performance: Performance | None = None,
               started: float, warnings: list[str], clocks: tuple = (None, None), sol: SolRecord | None = None) -> Trace:
    environment = session.environment or Environment(device="cuda" if session.device.startswith("cuda") else "cpu")
    environment = replace(environment, clocks_start=clocks[0], clocks_end=clocks[1])
    seconds = time.monotonic() - started
    phases = session.take_phases()
    phases["other"] = max(0.0, seconds - sum(v for k, v in phases.items() if is_part(k)))
    evaluation = Evaluation(status=status, timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
                            log=log[-16000:], environment=environment,
                            correctness=correctness,
                            performance=performance if status in (Status.PASSED, Status.REWARD_HACK) else None,
                            sol=sol, warnings=list(warnings) + list(session.runtime_warnings),
                            seconds=round(seconds, 3), phases_s={k: round(v, 3) for k, v in sorted(phases.items())})
    return Trace(definition=problem.name, workload=workload, solution=solution.name,
                 solution_hash=solution.content_hash(), evaluation=evaluation)


class WorkloadRun:
    """One workload's evaluation in progress: what every step needs, and the trace it ends with."""

    def __init__(self, session: DeviceSession, problem: Problem, solution: Solution, workload: Workload,
                 config: RunConfig, run_seed: int, started: float, warnings: list[str]):
        self.session, self.problem, self.solution, self.workload = session, problem, solution, workload
        self.config, self.run_seed, self.started = config, run_seed, started
        self.warnings = list(warnings)  # the solution's static-scan notes, then what this workload adds
        self.call_s = 0.0  # the slowest correctness trial's call (host seconds, synchronised)

    def trace(self, status: Status, log: str, **fields) -> Trace:
        return make_trace(self.problem, self.solution, self.workload, self.session, status, log,
                          started=self.started, warnings=self.warnings, **fields)

    def end(self, status: Status, log: str, **fields) -> WorkloadEnded:
        """The exception that ends this workload early with a trace of `status`."""
        return WorkloadEnded(self.trace(status, log, **fields))

    def warn_once(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)


class WorkloadEnded(Exception):
    """A workload finished before its last step (a failed trial, a hack caught while timing)."""

    def __init__(self, trace: Trace):
        super().__init__(trace.status.value)
        self.trace = trace
