"""Speed-of-light analysis of one workload: the work a reference must do, and the time it needs.

`analyse` traces the reference on meta tensors (see `capture`) and turns the record into FLOPs and
bytes under one of two conventions (docs/sol.md has the full rules):

- `strict` (default): physically faithful. Each tensor moves at its own dtype width; masked-off
  attention scores (causal, sliding window) are not work; matmuls run at the tensor-core rate of the
  dtype their operands came from; other FLOPs at the non-tensor fp32 rate.
- `solar`: the published SOL-ExecBench convention as far as public facts allow. One byte width for
  the whole problem (0.5 B with nvfp4 data, 1 B with fp8, also made inside, else 2 B), bool tensors
  free, masks ignored, only matmul FLOPs counted, all at the rate of that one precision.

`sol_time_ms` is the roofline: T_SOL = max(matmul time, other-FLOP time, bytes / HBM bandwidth),
since tensor cores, CUDA cores and memory work concurrently. `solar` adds a constant 0.4 us at the
2 B width, which is what the published bf16 B200 figures show above the roofline (tiny workloads
bottom out there); the published fp8 / nvfp4 figures are the bare roofline.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

from solbench.sol.capture import compile_reference, declared_io_capture, run_capture
from solbench.sol.capture_data import Capture, CaptureError
from solbench.sol.hardware import HardwareSpec
from solbench.spec import dtypes
from solbench.spec.definition import Definition

CONVENTIONS = ("strict", "solar")
SOLAR_OVERHEAD_MS = 0.0004  # published bounds sit this far above the roofline (inferred, docs/sol.md)
_CACHE_SIZE = 4096
UNTRACED = "<untraced reference>"  # the unknown_ops entry of a capture that fell back to declared I/O


@dataclass(frozen=True)
class WorkloadCost:
    convention: str
    method: str  # "meta" (traced exactly), "meta-approx" (some values invented), "declared-io" (not traced)
    flops_matmul: dict[str, float]  # by operand dtype (definition dtype names)
    flops_other: float
    bytes_min: float
    bytes_by_tensor: dict[str, float]
    output_bytes: float  # bytes of outputs that are not inputs handed back (own dtype widths)
    unknown_ops: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    byte_width: float | None = None  # solar: the single width used
    flops_matmul_provable: float = 0.0  # matmul FLOPs every correct kernel must do (see reject.py)

    @property
    def exact(self) -> bool:
        return self.method == "meta"

    @property
    def unpriced_ops(self) -> list[str]:
        """Operators the analyser has no cost for (`opcost`): with any, no bound is given (never a silent
        zero). A reference that could not be traced at all (`declared-io`) is not one: its bound is the
        bytes of its declared inputs and outputs, FLOPs unknown, and its method says so."""
        return [op for op in self.unknown_ops if not op.startswith(UNTRACED)]

    @property
    def unavailable(self) -> str | None:
        """Why this workload has no speed-of-light bound, or None when it has one."""
        ops = self.unpriced_ops
        return f"no speed-of-light bound: operator(s) not priced: {', '.join(ops)}" if ops else None

    @property
    def flops_matmul_total(self) -> float:
        return float(sum(self.flops_matmul.values()))

    @property
    def flops_total(self) -> float:
        return self.flops_matmul_total + self.flops_other

    def to_dict(self) -> dict:
        out = asdict(self)
        out["flops_matmul_total"] = self.flops_matmul_total
        out["unavailable"] = self.unavailable
        return out


@dataclass(frozen=True)
class SolBound:
    convention: str
    hw: str
    t_sol_ms: float
    binding: str  # "memory", "tensor" or "simt"
    arithmetic_intensity: float | None  # FLOPs per byte (None when no bytes move)
    t_memory_ms: float
    t_tensor_ms: float
    t_simt_ms: float

    def to_dict(self) -> dict:
        return asdict(self)


# -- capture cache --------------------------------------------------------------------------------

_lock = threading.Lock()
_captures: OrderedDict = OrderedDict()
_namespaces: dict[str, dict] = {}


def _key(definition: Definition, axes: dict[str, int], scalars: dict) -> tuple:
    digest = hashlib.sha1(definition.reference.encode()).hexdigest()
    shapes = repr(sorted((n, t.shape, t.dtype) for n, t in {**definition.inputs, **definition.outputs}.items()))
    return (definition.name, digest, shapes, tuple(sorted(axes.items())), tuple(sorted(scalars.items())))


def capture_for(definition: Definition, axes: dict[str, int], scalars: dict | None = None) -> Capture:
    """The (cached) capture of one workload; falls back to declared I/O when tracing fails."""
    scalars = dict(scalars or {})
    key = _key(definition, axes, scalars)
    with _lock:
        if key in _captures:
            _captures.move_to_end(key)
            return _captures[key]
    try:
        namespace = _namespaces.get(key[1])
        if namespace is None:
            namespace = compile_reference(definition.reference, definition.name)
            _namespaces[key[1]] = namespace
        capture = run_capture(definition, axes, scalars, namespace)
    except CaptureError as exc:
        capture = declared_io_capture(definition, axes, str(exc))
    except Exception as exc:  # reference does not even import: still give the I/O bound
        capture = declared_io_capture(definition, axes, f"{type(exc).__name__}: {str(exc)[:200]}")
    with _lock:
        _captures[key] = capture
        while len(_captures) > _CACHE_SIZE:
            _captures.popitem(last=False)
    return capture


# -- costing --------------------------------------------------------------------------------------

def analyse(definition: Definition, axis_values: dict[str, int], *, convention: str = "strict",
            scalars: dict | None = None) -> WorkloadCost:
    """FLOPs and bytes one workload must spend, under `convention`. Pure: no GPU, no real data.

    `axis_values` are a workload's axes (resolved here); `scalars` its scalar input values
    (`Workload.scalar_values()`), which some references branch on.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; expected one of {CONVENTIONS}")
    scalars = dict(scalars or {})
    for name, value in axis_values.items():  # published data passes some scalars among the axes
        if name in definition.inputs and name not in definition.axes:
            scalars.setdefault(name, value)
    axes = definition.resolve_axes(axis_values)
    capture = capture_for(definition, axes, scalars)
    return cost_from_capture(capture, convention)


def analyse_workload(definition: Definition, workload, *, convention: str = "strict") -> WorkloadCost:
    return analyse(definition, workload.axes, convention=convention, scalars=workload.scalar_values())


def _bytes_per_element(dtype: str) -> float:
    return dtypes.storage_bits(dtype) / 8


def _solar_width(capture: Capture) -> float:
    names = [u.dtype for u in capture.inputs.values()] + [o.dtype for o in capture.outputs.values()]
    names += [e.dtype for e in capture.matmuls] + list(capture.low_precision)  # quantised inside: fp8 too
    if any(n.startswith("float4") for n in names):
        return 0.5
    if any(n.startswith("float8") for n in names):
        return 1.0
    return 2.0


def _values_per_element(dtype: str) -> int:
    return 2 if dtype.startswith("float4") else 1  # packed fp4 stores two values per element


def cost_from_capture(capture: Capture, convention: str) -> WorkloadCost:
    unknown = [f"{name} (x{count})" for name, count in sorted(capture.unknown_ops.items())]
    notes = list(dict.fromkeys(capture.notes))
    if capture.fabricated:
        notes.append("approximate: values that depend on input data were invented: " + "; ".join(capture.fabricated[:5]))
    # for rejection: outputs handed back after an in-place update are not charged (see reject.py)
    output_bytes = sum(o.elements_moved * _bytes_per_element(o.dtype) for o in capture.outputs.values()
                       if o.aliases_input is None)
    for o in capture.outputs.values():
        if o.aliases_input is not None:
            notes.append(f"output {o.name} is input {o.aliases_input} updated in place: "
                         f"{o.elements_moved} of {o.numel} elements written")
    by_tensor: dict[str, float] = {}
    if convention == "strict":
        flops_mm: dict[str, float] = {}
        for e in capture.matmuls:
            flops_mm[e.dtype] = flops_mm.get(e.dtype, 0.0) + e.flops * e.active
        masked = sum(e.flops * (1 - e.active) for e in capture.matmuls)
        if masked > 0:
            notes.append(f"masked-off matmul work not counted: {masked:.4g} FLOPs")
        for name, use in capture.inputs.items():
            by_tensor[name] = use.elements_read * _bytes_per_element(use.dtype)
        for name, out in capture.outputs.items():
            by_tensor[name] = out.elements_moved * _bytes_per_element(out.dtype)
        width = None
        flops_other = capture.flops_other
    else:
        width = _solar_width(capture)
        flops_mm = {}
        for e in capture.matmuls:
            flops_mm[e.dtype] = flops_mm.get(e.dtype, 0.0) + e.flops  # logical K, also for packed fp4
        for name, use in capture.inputs.items():
            by_tensor[name] = 0.0 if use.dtype == "bool" else use.elements_read * _values_per_element(use.dtype) * width
        for name, out in capture.outputs.items():  # bool tensors are free both ways (masks)
            by_tensor[name] = 0.0 if out.dtype == "bool" else out.elements_moved * _values_per_element(out.dtype) * width
        flops_other = 0.0
    provable = sum(e.flops * e.active for e in capture.matmuls if e.provable) if capture.exact else 0.0
    return WorkloadCost(convention, capture.method, flops_mm, float(flops_other), float(sum(by_tensor.values())),
                        by_tensor, float(output_bytes), unknown, notes, width, float(provable))


def sol_time_ms(cost: WorkloadCost, hw: HardwareSpec, convention: str | None = None) -> SolBound:
    """Roofline time of `cost` on `hw`: the slowest of memory, tensor cores and CUDA cores."""
    convention = convention or cost.convention
    t_memory = cost.bytes_min / hw.hbm_bytes_per_s * 1e3
    if convention == "solar":
        precision = {0.5: "float4_e2m1fn_x2", 1.0: "float8_e4m3fn"}.get(cost.byte_width or 2.0, "bfloat16")
        t_tensor = cost.flops_matmul_total / (hw.matmul_tflops(precision) * 1e12) * 1e3
        t_simt = 0.0
    else:
        t_tensor = sum(f / (hw.matmul_tflops(d) * 1e12) for d, f in cost.flops_matmul.items()) * 1e3
        t_simt = cost.flops_other / (hw.fp32_simt_tflops * 1e12) * 1e3
    times = {"memory": t_memory, "tensor": t_tensor, "simt": t_simt}
    binding = max(times, key=times.get)
    t_sol = times[binding]
    if convention == "solar" and (cost.byte_width or 2.0) == 2.0:
        t_sol += SOLAR_OVERHEAD_MS  # the published fp8 / nvfp4 bounds carry no such offset
    intensity = cost.flops_total / cost.bytes_min if cost.bytes_min > 0 else None
    if t_sol <= 0 or not math.isfinite(t_sol):
        t_sol = 0.0
    return SolBound(convention, hw.name, t_sol, binding, intensity, t_memory, t_tensor, t_simt)

