"""The JSON-ready speed-of-light record stored in `Trace.evaluation.sol`."""

from __future__ import annotations

from solbench.sol.analyser import SolBound, WorkloadCost
from solbench.sol.hardware import HardwareSpec
from solbench.sol.reject import min_possible_time_ms
from solbench.sol.scores import anchored_score, log_score
from solbench.spec.sol_record import SolRecord


def sol_record(cost: WorkloadCost, bound: SolBound, hw: HardwareSpec, latency_ms: float | None,
               baseline_ms: float | None) -> SolRecord:
    """Everything a reader needs to re-derive the score: work, bound, achieved rates, scores.

    A workload with an operator the analyser cannot price gets no bound and no score (`unavailable`
    names the operators); the measurement is kept, and rejection still uses what is provable.
    """
    if cost.unavailable:
        return unavailable_record(cost, hw, latency_ms, baseline_ms)
    ok = latency_ms is not None and latency_ms > 0
    seconds = latency_ms / 1e3 if ok else None
    notes = list(cost.notes)
    measured = [t for t in (latency_ms, baseline_ms) if t is not None and t > 0]
    # An approximate capture (invented data-dependent values, or declared I/O only) can overestimate
    # the work; a measured time below its bound shows it did here, and a score anchored on it would
    # call the measured kernel "at the hardware limit".
    contradicted = cost.method != "meta" and bound.t_sol_ms > 0 and bool(measured) and min(measured) < bound.t_sol_ms
    if contradicted:
        notes.append(f"the approximate bound {bound.t_sol_ms:.4g} ms is above a measured time ({min(measured):.4g} ms): "
                     f"not a lower bound for this workload, so no score is given")
    return {
        "convention": cost.convention,
        "hw": hw.name,
        "hw_measured": hw.measured,
        "method": cost.method,
        "flops_matmul": dict(cost.flops_matmul),
        "flops_matmul_total": cost.flops_matmul_total,
        "flops_other": cost.flops_other,
        "flops": cost.flops_total,
        "bytes": cost.bytes_min,
        "bytes_by_tensor": dict(cost.bytes_by_tensor),
        "t_sol_ms": bound.t_sol_ms,
        "bound": bound.binding,
        "t_memory_ms": bound.t_memory_ms,
        "t_tensor_ms": bound.t_tensor_ms,
        "t_simt_ms": bound.t_simt_ms,
        "intensity": bound.arithmetic_intensity,
        "t_min_possible_ms": min_possible_time_ms(cost, hw),
        "latency_ms": latency_ms,
        "achieved_tflops": cost.flops_total / seconds / 1e12 if seconds else None,
        "achieved_gbps": cost.bytes_min / seconds / 1e9 if seconds else None,
        "sol_fraction": bound.t_sol_ms / latency_ms if ok and bound.t_sol_ms > 0 else None,
        "t_baseline_ms": baseline_ms,
        "score": None if contradicted else anchored_score(latency_ms, baseline_ms, bound.t_sol_ms),
        "log_score": None if contradicted else log_score(latency_ms, baseline_ms, bound.t_sol_ms),
        "unknown_ops": list(cost.unknown_ops),
        "notes": notes,
    }


def unavailable_record(cost: WorkloadCost, hw: HardwareSpec, latency_ms: float | None,
                       baseline_ms: float | None) -> SolRecord:
    """The record of a workload without a bound: what was measured, and which operators stopped the bound."""
    return {
        "convention": cost.convention, "hw": hw.name, "hw_measured": hw.measured, "method": cost.method,
        "unavailable": cost.unavailable, "t_sol_ms": None, "score": None, "log_score": None, "sol_fraction": None,
        "t_min_possible_ms": min_possible_time_ms(cost, hw), "latency_ms": latency_ms, "t_baseline_ms": baseline_ms,
        "unknown_ops": list(cost.unknown_ops), "notes": list(cost.notes),
    }
