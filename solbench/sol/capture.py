"""Run a reference on meta tensors and record the work it does, op by op.

Inputs are meta tensors of the declared shapes and dtypes (fp8 and packed fp4 included: meta
kernels accept them), so no GPU and no real data is needed. Tensors that do not depend on any input
(masks from `triu`, `arange` comparisons, rotary tables) are computed for real on the CPU when small,
so their values are known: that is how a causal or sliding-window mask is measured rather than
guessed. Values that depend on inputs are unknown; when the reference asks for one (`.item()`,
`nonzero`) a value is invented and the capture is marked approximate.

What is recorded (convention-free; `analyser` turns it into costs):
- each matmul-class op: FLOPs, operand dtype (the narrowest declared dtype the data came from) and
  the fraction of it a mask leaves active;
- other FLOPs (opcost's convention), and the names of ops not understood;
- for each input, the elements actually read (slices read their region, gathers the rows gathered,
  broadcasts their distinct elements);
- for each output, its declared size and whether it is an input returned (possibly modified in place),
  with the elements written into it.

This module holds the entry points (`run_capture`, `declared_io_capture`) and the custom-input and
output handling; the pieces live beside it: `capture_data` (the records), `meta_tracer` (the
dispatch mode that runs and costs each aten op), `value_tracking` (dtype origins, constants,
masks), `meta_redirect` (the function mode that keeps everything on meta, SDPA as one op) and
`inplace` (what in-place writes touch).
"""

from __future__ import annotations

import contextlib
import math

import torch

from solbench.sol import loops, paged
from solbench.sol.capture_data import (  # noqa: F401 - re-exported: the capture's public types
    BudgetExceeded,
    Capture,
    CaptureError,
    InputUse,
    MatmulEvent,
    OutputInfo,
    WallClockLimit,
)
from solbench.sol.meta_redirect import MetaRedirect
from solbench.sol.meta_tracer import Tracer
from solbench.sol.value_tracking import is_float
from solbench.spec import dtypes

REAL_FLOAT_INPUT_BYTES = 1 << 24  # float inputs from a custom entrypoint kept real (masks) up to this storage
CUSTOM_INPUT_SEED = 0  # the CPU generator's seed while a custom-input entrypoint runs


def _meta_input(shape: tuple[int, ...], dtype_name: str) -> torch.Tensor:
    return torch.empty(shape, dtype=dtypes.torch_dtype(dtype_name), device="meta")


def compile_reference(source: str, name: str) -> dict:
    """Execute the reference module source; returns its namespace."""
    # `range` watched: a loop bound to exceed the trace budget stops after a few turns (`loops`)
    namespace: dict = {"__name__": f"solbench_reference_{abs(hash(name))}", "range": loops.watched_range}
    code = compile(source, f"<reference {name}>", "exec")
    exec(code, namespace)  # noqa: S102 - the reference is trusted problem code, run only on meta tensors
    return namespace


def run_capture(definition, axis_values: dict[str, int], scalars: dict[str, float | int | bool],
                namespace: dict | None = None, *, max_ops: int | None = None, recorder=None) -> Capture:
    """Trace `definition.reference` on meta inputs for one workload's axes; raises CaptureError.

    `recorder`, a dispatch mode (`op_set.OpSetRecorder`), sees the reference's ops before the tracer.
    """
    namespace = namespace if namespace is not None else compile_reference(definition.reference, definition.name)
    run = namespace["run"]
    tracer = Tracer(max_ops=max_ops)
    redirect = MetaRedirect(tracer)
    args = []
    shapes = definition.input_shapes(axis_values)
    custom = _custom_values(definition, axis_values, scalars, namespace, tracer)
    for name, spec in definition.inputs.items():
        shape = shapes[name]
        given = custom.get(name)
        if shape is None:
            if isinstance(given, torch.Tensor) and given.device.type != "meta" and given.numel() == 1:
                given = given.item()
            if not isinstance(given, (int, float, bool)):
                given = scalars.get(name, _default_scalar(spec.dtype))
            args.append(given)
            continue
        if (isinstance(given, torch.Tensor) and given.device.type != "meta" and tuple(given.shape) == tuple(shape)
                and given.dtype == dtypes.torch_dtype(spec.dtype)
                and (not is_float(given.dtype) or given.untyped_storage().nbytes() <= REAL_FLOAT_INPUT_BYTES)):
            t = given  # real values from the custom entrypoint: routing, offsets and masks become exact
        else:
            t = _meta_input(shape, spec.dtype)  # outside the modes: float inputs are never real
        tracer.add_input(name, t, spec.dtype)
        args.append(t)
    try:
        with redirect, tracer, torch.no_grad(), loops.watching(tracer), (recorder or contextlib.nullcontext()):
            result = run(*args)
    except CaptureError:
        raise
    except Exception as exc:
        raise CaptureError(f"{type(exc).__name__}: {str(exc)[:300]}") from exc
    outputs = _match_outputs(definition, axis_values, result, tracer)
    _cap_pools(tracer.inputs, paged.pool_reads(definition, axis_values), tracer.notes)
    method = "meta-approx" if tracer.fabricated else "meta"
    return Capture(method, tracer.matmuls, tracer.flops_other, tracer.inputs, outputs, dict(tracer.unknown),
                   sorted(set(tracer.fabricated)), tracer.notes, tracer.n_ops, sorted(tracer.low_precision))


def _custom_values(definition, axis_values, scalars, namespace, tracer: Tracer) -> dict:
    """What the custom-input entrypoint makes, run like the reference (big tensors stay meta).

    Its scalars, integer tensors (indices, routing, sequence offsets) and small float tensors (masks)
    are used, so data-dependent references see real, valid values; big float tensors stay meta.
    """
    entry = definition.custom_inputs_entrypoint
    if not entry or entry not in namespace:
        return {}
    helper = Tracer()
    helper.recording = False
    try:
        with torch.random.fork_rng(devices=[]), MetaRedirect(helper), helper, torch.no_grad(), \
                loops.watching(helper):
            torch.manual_seed(CUSTOM_INPUT_SEED)  # the same routing every time: bounds are reproducible
            values = namespace[entry]({**axis_values, **scalars}, torch.device("cpu"))
    except Exception as exc:
        why = str(exc) if isinstance(exc, WallClockLimit) else type(exc).__name__  # never silent
        tracer.notes.append(f"custom-input entrypoint {entry} not usable on meta ({why}); "
                            f"inputs from declared shapes")
        return {}
    if not isinstance(values, dict):
        return {}
    if helper.fabricated:
        tracer.notes.append(f"custom-input entrypoint {entry}: {len(helper.fabricated)} values invented")
    kept = {k: v for k, v in values.items()
            if not (isinstance(v, torch.Tensor) and (v.device.type == "meta" or v in helper.tainted))}
    # Ops such as SDPA refuse a mix of meta and real float operands: when some float input had to
    # stay meta, all float inputs do (integer and bool tensors keep their real values).
    if any(isinstance(v, torch.Tensor) and v.is_floating_point() and k not in kept for k, v in values.items()):
        kept = {k: v for k, v in kept.items() if not (isinstance(v, torch.Tensor) and v.is_floating_point())}
    return kept


def _cap_pools(inputs: dict[str, InputUse], pools: dict, notes: list[str]) -> None:
    """A paged KV pool is read at most at the pages its index list names (`paged`), traced or not."""
    for name, (elements, note) in pools.items():
        use = inputs.get(name)
        if use is not None and use.elements_read > elements:
            use.read_cap = elements
            notes.append(note)


def _default_scalar(dtype_name: str):
    if dtype_name == "bool":
        return False
    return 1.0 if dtypes.is_floating(dtype_name) else 1


def _match_outputs(definition, axis_values, result, tracer: Tracer) -> dict[str, OutputInfo]:
    shapes = definition.output_shapes(axis_values)
    if isinstance(result, dict):
        values = [result.get(n) for n in definition.outputs]
    elif isinstance(result, (tuple, list)):
        values = list(result)
    else:
        values = [result]
    if len(values) != len(definition.outputs):
        tracer.notes.append(f"reference returned {len(values)} values for {len(definition.outputs)} "
                            f"declared outputs; sizes taken from the declaration")
    outputs = {}
    for i, (name, spec) in enumerate(definition.outputs.items()):
        shape = shapes[name]
        numel = 0 if shape is None else math.prod(shape)
        value = values[i] if i < len(values) else None
        alias = tracer.roots.get(value) if isinstance(value, torch.Tensor) else None
        written = tracer.inputs[alias].elements_written if alias is not None else None
        distinct = broadcast_distinct(value) if isinstance(value, torch.Tensor) and tuple(value.shape) == shape else None
        if distinct is not None and distinct < numel:
            tracer.notes.append(f"output {name} is a broadcast view: {distinct} distinct of {numel} elements written")
        outputs[name] = OutputInfo(name, spec.dtype, numel, alias, written, distinct)
    return outputs


def broadcast_distinct(value: torch.Tensor) -> int | None:
    """Distinct elements of an expanded view (dimensions of stride 0 repeat), or None when none repeats."""
    if not any(st == 0 and sz > 1 for st, sz in zip(value.stride(), value.shape)):
        return None
    return math.prod(sz for st, sz in zip(value.stride(), value.shape) if st != 0)


def declared_io_capture(definition, axis_values: dict[str, int], reason: str) -> Capture:
    """The fallback when tracing fails: every declared input read (a paged KV pool only at the pages
    its index list names, `paged`), every output written, FLOPs unknown."""
    inputs = {}
    pools = paged.pool_reads(definition, axis_values)
    notes = [f"not traced ({reason}); bytes are every declared input and output, FLOPs unknown"]
    for name, shape in definition.input_shapes(axis_values).items():
        if shape is None:
            continue
        numel = math.prod(shape)
        use = InputUse(name, definition.inputs[name].dtype, numel)
        use.regions[("all",)] = numel
        inputs[name] = use
    _cap_pools(inputs, pools, notes)
    outputs = {name: OutputInfo(name, definition.outputs[name].dtype, 0 if s is None else math.prod(s))
               for name, s in definition.output_shapes(axis_values).items()}
    return Capture("declared-io", [], 0.0, inputs, outputs, {"<untraced reference>": 1}, [], notes, 0)
