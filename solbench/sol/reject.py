"""Refusing measurements no hardware could produce.

The rejection bound must sit provably below what any *correct* kernel can achieve on the running
GPU, so a legitimate kernel is never refused. It therefore uses only work no correct kernel can
avoid, at rates no kernel can exceed:

- output bytes: every output must be written at least once (outputs that are inputs handed back,
  possibly modified in place, count nothing). Up to one L2's worth of them may still sit in the
  cache when the kernel ends, so only the excess over the L2 size is charged to HBM bandwidth.
- matmul FLOPs that are provable: both operands come from the inputs (a product with a constant
  can be rewritten), no input-dependent mask could let a kernel skip them, and the trace is exact
  (no invented values). Masked-off work (causal) is already excluded. They are charged at the
  *fastest* tensor rate of any dtype on the GPU, since a kernel is free to pick a lower precision
  that still passes the tolerance.
- rates are the datasheet boost figures (`reject_with` / `based_on`), never a locked-clock or a
  measured spec, which real kernels can beat.

The larger of the two times is divided by SAFETY_FACTOR (2): that covers algebraic savings (one
level of Strassen saves 1/8), clock and bandwidth figures rounded down in datasheets, and timer
granularity. With a measured spec that names no datasheet, the factor is 4.
"""

from __future__ import annotations

from solbench.sol.analyser import WorkloadCost
from solbench.sol.hardware import HardwareSpec, UnknownHardwareError, load_spec

SAFETY_FACTOR = 2.0
MEASURED_SAFETY_FACTOR = 4.0


def rejection_spec(hw: HardwareSpec) -> tuple[HardwareSpec, float]:
    """The spec whose rates bound this GPU, and the safety factor that goes with it."""
    for name in (hw.reject_with, hw.based_on):
        if name:
            try:
                return load_spec(name), SAFETY_FACTOR
            except UnknownHardwareError:
                pass
    return hw, (MEASURED_SAFETY_FACTOR if hw.measured else SAFETY_FACTOR)


def bound_parts_ms(cost: WorkloadCost, hw: HardwareSpec) -> dict[str, float]:
    spec, factor = rejection_spec(hw)
    spill_bytes = max(0.0, cost.output_bytes - float(spec.l2_bytes or 0))
    t_write = spill_bytes / spec.hbm_bytes_per_s * 1e3
    flops = cost.flops_matmul_provable if cost.exact else 0.0
    t_flops = flops / (spec.fastest_matmul_tflops() * 1e12) * 1e3
    return {"write_ms": t_write, "matmul_ms": t_flops, "safety_factor": factor, "spill_bytes": spill_bytes,
            "provable_flops": flops, "spec": spec.name}


def min_possible_time_ms(cost: WorkloadCost, hw: HardwareSpec) -> float:
    """A time no correct kernel can beat on `hw` (0 when nothing provable is known)."""
    parts = bound_parts_ms(cost, hw)
    return max(parts["write_ms"], parts["matmul_ms"]) / parts["safety_factor"]


def faster_than_light(latency_ms: float, cost: WorkloadCost, hw: HardwareSpec) -> str | None:
    """A message for the trace log when `latency_ms` is impossible on `hw`; None when it is plausible."""
    bound = min_possible_time_ms(cost, hw)
    if bound <= 0 or latency_ms is None or latency_ms >= bound:
        return None
    parts = bound_parts_ms(cost, hw)
    return (f"REWARD_HACK: measured {latency_ms:.6g} ms is below the hardware limit {bound:.6g} ms on "
            f"{parts['spec']} (max of writing {parts['spill_bytes']:.4g} output bytes beyond L2 "
            f"= {parts['write_ms']:.6g} ms and {parts['provable_flops']:.4g} unavoidable matmul FLOPs at the "
            f"fastest tensor rate = {parts['matmul_ms']:.6g} ms, divided by safety factor "
            f"{parts['safety_factor']:g}); no correct kernel can be this fast")
