"""What a workload's definition says about its tensors, read in the orchestrator without generating them:
the shapes the outputs must have, and the bytes of one input or output set (which decide cache trims and
how many sampled outputs a worker must keep)."""

from __future__ import annotations

import math

from solbench.spec import dtypes
from solbench.spec.problem import Problem
from solbench.spec.workload import Workload

# Outputs up to this size are always kept for every sampled check; above it the solution's worker may
# keep fewer (at least one) when a quarter of its free memory holds no more, and the trace says so.
ALWAYS_KEPT_OUTPUT_BYTES = 1 << 30


def expected_outputs(problem: Problem, workload: Workload) -> list | None:
    """(dtype, shape or None for a scalar) per declared output of this workload, or None when the
    axes do not resolve here (the workers report that)."""
    definition = problem.definition
    try:
        shapes = definition.output_shapes(definition.resolve_axes(workload.axes))
    except Exception:  # noqa: BLE001 - a bad workload is reported by the workers, with their message
        return None
    return [(spec.dtype, shapes.get(name)) for name, spec in definition.outputs.items()]


def declared_set_bytes(problem: Problem, workload: Workload, which: str = "inputs") -> int:
    """The bytes of one set of `which` ("inputs" or "outputs") as the definition declares it (0 where
    the axes do not resolve here)."""
    definition = problem.definition
    tensors = definition.inputs if which == "inputs" else definition.outputs
    try:
        axes = definition.resolve_axes(workload.axes)
        shapes = definition.input_shapes(axes) if which == "inputs" else definition.output_shapes(axes)
    except Exception:  # noqa: BLE001 - a bad workload is reported by the workers, with their message
        return 0
    return sum(math.prod(shape) * dtypes.storage_bits(tensors[name].dtype) // 8
               for name, shape in shapes.items() if shape is not None)


def required_checks(problem: Problem, workload: Workload, wanted: int) -> int:
    """How many sampled timed outputs the solution's worker must keep (fewer only for huge outputs)."""
    out_bytes = declared_set_bytes(problem, workload, "outputs")
    return wanted if out_bytes * wanted <= ALWAYS_KEPT_OUTPUT_BYTES else min(wanted, 1)
