"""The speed-of-light record a trace keeps in `evaluation.sol` (written by `solbench.sol.record`).

A TypedDict: typed and validated where a trace is read, and still the mapping its readers index
(`sol.get("score")`). Every key is optional: older traces and other tools' have fewer; keys not listed
here are kept as they are.
"""

from __future__ import annotations

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

Number = int | float


@with_config(ConfigDict(extra="allow"))  # a key added to the record (or another tool's) is kept, untyped
class SolRecord(TypedDict, total=False):
    convention: str  # "strict" or "solar" (sol/analyser.py)
    hw: str  # the hardware spec the bound is on
    hw_measured: bool  # whether that spec's rates were measured rather than datasheet figures
    method: str  # how the work was counted: "meta" (traced) or an approximation
    flops_matmul: dict[str, Number]
    flops_matmul_total: Number
    flops_other: Number
    flops: Number
    bytes: Number
    bytes_by_tensor: dict[str, Number]
    t_sol_ms: Number | None  # None: no bound (see `unavailable`)
    bound: str  # which roof binds: "memory", "tensor" or "simt"
    t_memory_ms: Number
    t_tensor_ms: Number
    t_simt_ms: Number
    intensity: Number | None
    t_min_possible_ms: Number | None  # below this the result is faster than light
    latency_ms: Number | None
    achieved_tflops: Number | None
    achieved_gbps: Number | None
    sol_fraction: Number | None
    t_baseline_ms: Number | None
    score: Number | None
    log_score: Number | None
    unknown_ops: list[str]
    notes: list[str]
    unscored: str  # without a GPU: why there is no score
    unavailable: str | None  # why there is no bound at all (operators the analyser cannot price)
    hw_chosen_by: str  # without a GPU: what chose `hw` ("--hw" or "target_hardware")
    baselines_ms: dict[str, Number | None]  # every baseline timed; T_b is the fastest
