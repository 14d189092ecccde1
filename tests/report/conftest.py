"""Traces built directly (no runs): the report layer only needs the Trace format."""

from __future__ import annotations

import json
from pathlib import Path

from solbench.spec.trace import Correctness, Environment, Evaluation, LatencyStats, Performance, Status, Trace


def make_trace(problem: str = "rmsnorm", solution: str = "fast", uuid: str = "w0", *,
               status: Status | str = Status.PASSED, latency_ms: float | None = 1.0, rel_ci: float | None = 0.02,
               reference_ms: float | None = 2.0, sol: dict | None = None, hardware: str = "NVIDIA H100 80GB HBM3",
               timestamp: str = "2026-01-01T00:00:00+00:00", solution_hash: str | None = None,
               axes: dict | None = None, log: str = "", flags: list[str] | None = None) -> Trace:
    status = Status(status)
    performance = None
    if status == Status.PASSED and latency_ms is not None:
        ci = (latency_ms * (1 - rel_ci), latency_ms * (1 + rel_ci)) if rel_ci is not None else (None, None)
        stats = LatencyStats(median_ms=latency_ms, mean_ms=latency_ms * 1.01, min_ms=latency_ms * 0.95,
                             max_ms=latency_ms * 1.2, stdev_ms=latency_ms * 0.03, n=50, ci_low_ms=ci[0],
                             ci_high_ms=ci[1], iqr_ms=latency_ms * 0.04, method="cuda_events")
        ref = (LatencyStats(median_ms=reference_ms, mean_ms=reference_ms, min_ms=reference_ms, max_ms=reference_ms,
                            stdev_ms=0.0, n=50) if reference_ms else None)
        performance = Performance(latency_ms, reference_ms, reference_ms / latency_ms if reference_ms else None,
                                  stats, ref)
    evaluation = Evaluation(status=status, timestamp=timestamp, log=log or ("" if status == Status.PASSED else
                                                                               f"{status.value}: details"),
                            environment=Environment(device="cuda", hardware=hardware),
                            correctness=Correctness(max_absolute_error=1e-3, flags=list(flags or []),
                                                    message="numerics flagged: y: details" if flags else None),
                            performance=performance, sol=sol)
    return Trace(definition=problem, workload={"uuid": uuid, "axes": axes or {"n": 1024}, "inputs": {}},
                 solution=solution, solution_hash=solution_hash or f"h-{solution}", evaluation=evaluation)


def write_traces(path: Path, traces: list[Trace], extra_lines: list[str] = ()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(t.to_dict()) for t in traces] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n")
    return path


def sol(t_sol_ms: float, latency_ms: float, t_baseline_ms: float | None = None) -> dict:
    """A speed-of-light block as the analyser writes it (score from SOL-ExecBench's formula)."""
    tb = t_baseline_ms if t_baseline_ms is not None else 4 * t_sol_ms
    score = 1 / (1 + (latency_ms - t_sol_ms) / (tb - t_sol_ms))
    return {"t_sol_ms": t_sol_ms, "t_baseline_ms": tb, "score": score, "bound": "memory"}


def sample_traces() -> list[Trace]:
    """Two problems, two solutions each, a failure, a skip and full SOL data: enough to draw every chart."""
    traces = []
    for problem, t_sol in (("rmsnorm_h4096", 0.01), ("gemm_bf16", 0.2)):
        for i, n in enumerate((256, 1024, 4096, 16384)):
            scale = n / 1024
            for solution, factor in (("triton_fast", 1.6), (f"reference_{problem}", 5.0)):
                lat = t_sol * scale * factor
                traces.append(make_trace(problem, solution, f"{problem}-w{i}", latency_ms=lat,
                                         reference_ms=t_sol * scale * 5.0, sol=sol(t_sol * scale, lat),
                                         axes={"n": n}))
    traces.append(make_trace("gemm_bf16", "cuda_broken", "gemm_bf16-w0", status=Status.INCORRECT_NUMERICAL,
                             axes={"n": 256}, log="max abs error 0.5 > atol 0.01"))
    traces.append(make_trace("gemm_bf16", "cuda_broken", "gemm_bf16-w1", status=Status.PASSED, latency_ms=0.1,
                             reference_ms=0.25, sol=sol(0.05, 0.1), axes={"n": 1024}))
    traces.append(make_trace("gemm_bf16", "cuda_broken", "gemm_bf16-w2", status=Status.SKIPPED, axes={"n": 4096}))
    return traces
