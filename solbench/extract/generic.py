"""A problem draft for any captured block: its exported graph as code, its axes, inputs and workloads.

Axes come from the export's symbols: a dimension export kept dynamic is a `var` axis, named after the
model axis it follows (`batch_size`, `seq_len`, or `seq_len_x2` when it moves at twice the rate); a
dimension that is an expression of symbols is an `expr` axis; everything else is `const`. Workloads
are the model's real sizes (`BuiltModel.workload_axes`) mapped through the same relations, after the two
small validated sizes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction

import torch

from solbench.extract.capture import Call
from solbench.extract.codegen import Generated, Input
from solbench.extract.draft import Arg, Draft
from solbench.extract.known import known_buffers, literal
from solbench.spec.errors import SpecError

DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32",
               torch.float64: "float64", torch.int64: "int64", torch.int32: "int32", torch.bool: "bool",
               torch.int8: "int8", torch.uint8: "uint8"}
MAX_WORKLOADS = 12


@dataclass
class Block:
    """One structurally distinct block: its representative path, every path sharing it, its calls."""

    path: str
    class_name: str
    module: torch.nn.Module
    calls: list[Call]  # at each capture point
    members: list[str] = field(default_factory=list)

    @property
    def op_type(self) -> str:
        return _snake(self.class_name)

    def call_in(self, recorded: dict[str, Call]) -> Call | None:
        """This block's call in one recording of the model's module calls (`capture.record_calls`)."""
        return recorded.get(self.path)

    def grad_flags_in(self, flags: dict[str, list[bool]]) -> list[bool] | None:
        """Whether each tensor of its call takes a gradient in the model (`backward.grad_flags`)."""
        return flags.get(self.path)

    def finish(self, draft: Draft) -> None:
        """Adjust this block's draft before it is named and validated (nothing for a module's own block)."""


@dataclass
class Axis:
    name: str
    # (model axis, ratio, offset): value = ratio * model axis + offset (a relative-position table spans
    # 2 x frames - 1); None where no model axis fits
    relation: tuple[str, Fraction, int] | None
    values: tuple[int, ...]  # at each capture point


def symbol_axes(gen: Generated, block: Block, model_points: list[dict[str, int]]) -> dict[str, Axis]:
    """Each free symbol of the inputs' shapes -> a named axis, related to a model axis where one fits."""
    tensor_calls = [[x for x in call.leaves() if isinstance(x, torch.Tensor)] for call in block.calls]
    axes: dict[str, Axis] = {}
    used: set[str] = set()
    for inp in gen.inputs:
        if inp.kind != "user":
            continue
        for dim, size in enumerate(inp.value.shape):
            expr = _expr(size)
            if expr is None or not expr.is_Symbol or str(expr) in axes:
                continue
            values = tuple(int(leaves[inp.target].shape[dim]) for leaves in tensor_calls)
            axes[str(expr)] = _name_axis(values, model_points, used)
    return axes


def _name_axis(values: tuple[int, ...], model_points: list[dict[str, int]], used: set[str]) -> Axis:
    relation = related_axis(values, model_points)
    if relation is not None:
        axis, ratio, offset = relation
        base = axis if ratio == 1 else f"{axis}_x{ratio}".replace("/", "_div")
        base += f"_plus{offset}" if offset > 0 else f"_minus{-offset}" if offset < 0 else ""
        name, k = base, 2
        while name in used:  # a second symbol moving with the same model axis (an image's width)
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        return Axis(name, relation, values)
    name = f"size_{len(used)}"
    used.add(name)
    return Axis(name, None, values)


def related_axis(values: tuple[int, ...] | list[int],
                 model_points: list[dict[str, int]]) -> tuple[str, Fraction, int] | None:
    """(model axis, ratio, offset) that a size taking `values` at the capture points follows, a plain ratio
    before an offset; None where no model axis fits."""
    fits = [(axis, *fit) for axis in model_points[0]
            if (fit := _fit_line([p[axis] for p in model_points[: len(values)]], values)) is not None]
    return min(fits, key=lambda fit: fit[2] != 0) if fits else None


def _fit_line(model: list[int], values: tuple[int, ...] | list[int]) -> tuple[Fraction, int] | None:
    """(ratio, offset) with value = ratio * model + offset at every point: a ratio alone when one fits,
    else a line through two distinct model sizes that the third point confirms (three points, two unknowns)."""
    ratio = Fraction(values[0], model[0])
    if all(Fraction(v, m) == ratio for v, m in zip(values, model)):
        return ratio, 0
    distinct = {m: v for m, v in zip(model, values)}
    if len(distinct) < 3:
        return None
    (m0, v0), (m1, v1) = list(distinct.items())[:2]
    ratio = Fraction(v1 - v0, m1 - m0)
    offset = v0 - ratio * m0
    if ratio <= 0 or offset.denominator != 1 or any(ratio * m + offset != v for m, v in zip(model, values)):
        return None
    return ratio, int(offset)


def _expr(size):
    """The sympy expression of a symbolic size, None for a plain int."""
    if isinstance(size, torch.SymInt):
        return size.node.expr
    return None


def shape_names(value: torch.Tensor, axes: dict[str, Axis], extra: dict[str, tuple]) -> tuple[str, ...]:
    """An input's shape as axis names: digits for constants, var names, and `expr` axes added to `extra`."""
    out = []
    for size in value.shape:
        expr = _expr(size)
        if expr is None:
            out.append(str(int(size)))
        elif expr.is_Symbol and str(expr) in axes:
            out.append(axes[str(expr)].name)
        elif expr.is_number:
            out.append(str(int(expr)))
        else:
            if any(str(s) not in axes for s in expr.free_symbols):
                raise ValueError(f"size {expr} depends on a size no input has")
            text = python_expression(expr, {str(s): axes[str(s)].name for s in expr.free_symbols})
            name = next((n for n, spec in extra.items() if spec[1] == text), None)
            if name is None:
                name = f"dim_{len(extra)}"
                extra[name] = ("expr", text, f"derived: {text}")
            out.append(name)
    return tuple(out)


def python_expression(expr, names: dict[str, str]) -> str:
    """A sympy size expression as the definition format's arithmetic (+, *, //, %), axis names for symbols."""
    import sympy

    func = type(expr).__name__
    if expr.is_Symbol:
        return names[str(expr)]
    if expr.is_Integer:
        return str(int(expr))
    parts = [python_expression(a, names) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(parts) + ")"
    if isinstance(expr, sympy.Mul):
        return "(" + " * ".join(parts) + ")"
    if func in ("Mod", "PythonMod"):
        return f"({parts[0]} % {parts[1]})"
    if func == "FloorDiv":
        return f"({parts[0]} // {parts[1]})"
    if func == "CeilDiv":
        return f"(-(-{parts[0]} // {parts[1]}))"
    raise ValueError(f"size expression {expr} uses {func}")


def make_draft(block: Block, gen: Generated, model_id: str, model_points: list[dict[str, int]],
               workload_axes: dict[str, tuple[int, ...]], dtype: torch.dtype, name: str) -> Draft:
    """The draft of one block: declarations, get_inputs recipe, run() and its workloads."""
    axes = symbol_axes(gen, block, model_points)
    extra: dict[str, tuple] = {}
    values = known_buffers(block.module)
    inputs = [_arg(inp, axes, extra, values) for inp in gen.inputs]
    unsupported = [f"{name_} is {value.dtype}" for name_, value in gen.outputs if value.dtype not in DTYPE_NAMES]
    if unsupported:  # DeepSeek-V2's rotary table is complex: the problem format has no complex dtype
        raise SpecError(f"an output dtype the problem format has no name for ({', '.join(unsupported)})")
    outputs = [Arg(name_, shape_names(value, axes, extra), DTYPE_NAMES[value.dtype],
                   "an output of the block")  # no model path: the same block in two models is one problem
               for name_, value in gen.outputs]
    declared: dict[str, tuple] = {}
    for arg in (*inputs, *outputs):
        for entry in arg.shape:
            if not entry.isdigit() and entry not in declared and entry not in extra:
                declared[entry] = ("var", _describe(entry, axes))
    declared.update(extra)
    points = _workload_points(axes, model_points, workload_axes)
    # Nothing model-specific in the text: one computation reached from several models is one problem
    # (emit.merge), and the models that share it are listed in its definition (`solbench.models`).
    description = (f"{block.class_name}, captured with torch.export and emitted at torch/F level; the models "
                   "and modules that share it are recorded in definition.json.")
    return Draft(name=name, op_type=block.op_type, description=description, axes=declared, inputs=inputs,
                 outputs=outputs, code=gen.code, shapes="", dtype=DTYPE_NAMES[dtype], workload_points=points,
                 hints={"module_class": block.class_name, "module_paths": block.members[:32]},
                 capture_points=[{a.name: a.values[i] for a in axes.values()} for i in range(len(block.calls))])


def _describe(name: str, axes: dict[str, Axis]) -> str:
    axis = next((a for a in axes.values() if a.name == name), None)
    if axis is None or axis.relation is None:
        return "a variable size of this block"
    model_axis, ratio, offset = axis.relation
    text = model_axis if ratio == 1 else f"{ratio} x {model_axis}"
    return text + (f" + {offset}" if offset > 0 else f" - {-offset}" if offset < 0 else "")


def _arg(inp: Input, axes: dict[str, Axis], extra: dict[str, tuple],
         known: dict[str, torch.Tensor] | None = None) -> Arg:
    value = inp.value
    shape = shape_names(value, axes, extra)
    dtype = DTYPE_NAMES.get(value.dtype)
    if dtype is None:
        raise ValueError(f"input {inp.name} has dtype {value.dtype}")
    if inp.kind == "user":
        init = "randn" if value.is_floating_point() and "mask" not in inp.name else \
            ("ones" if value.dtype == torch.bool else "zeros")
        if "position" in inp.name and not value.is_floating_point() and value.dtype != torch.bool and shape:
            init = "positions"  # a rotary table at position 0 only is cos 1, sin 0: nothing to compute
        return Arg(inp.name, shape, dtype, f"the block's input {inp.name}", init)
    path = str(inp.target)
    leaf = path.rsplit(".", 1)[-1]
    if inp.kind == "buffer" and path in (known or {}):  # computed from the config: its values, not a draw
        return Arg(inp.name, shape, dtype, f"buffer {path} (its value follows from the config)", "value",
                   value=literal(known[path]))
    if not value.is_floating_point():
        return Arg(inp.name, shape, dtype, f"{inp.kind} {path}", "zeros")
    if ("norm" in path.lower() and leaf == "weight") or leaf == "running_var":  # a variance must be positive
        return Arg(inp.name, shape, dtype, f"{inp.kind} {path}", "norm_weight")
    if value.dim() <= 1 or leaf.endswith("bias"):
        return Arg(inp.name, shape, dtype, f"{inp.kind} {path}", "bias")
    fan_in = str(math.prod(int(s) for s in value.shape[1:]))
    return Arg(inp.name, shape, dtype, f"{inp.kind} {path}", "weight", fan_in=fan_in)


def _workload_points(axes: dict[str, Axis], model_points: list[dict[str, int]],
                     workload_axes: dict[str, tuple[int, ...]]) -> list[dict[str, int]]:
    """The validated capture sizes first (small, for CPU smoke runs), then the model's real sizes."""
    points: list[dict[str, int]] = []
    for index in range(1, len(model_points)):
        point = {a.name: a.values[index] for a in axes.values() if index < len(a.values)}
        if point not in points:
            points.append(point)
    if all(a.relation for a in axes.values()) and axes:
        names = list(workload_axes)
        for combo in itertools.product(*(workload_axes[n] for n in names)):
            model = dict(zip(names, combo))
            point = {}
            for axis in axes.values():
                base, ratio, offset = axis.relation
                value = ratio * model.get(base, 0) + offset
                if value.denominator != 1 or value <= 0:
                    break
                point[axis.name] = int(value)
            else:
                if point not in points:
                    points.append(point)
            if len(points) >= MAX_WORKLOADS:
                break
    return points or [{}]


def _snake(name: str) -> str:
    """WhisperEncoderLayer -> whisper_encoder_layer, RMSNorm -> rms_norm."""
    import re

    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[0-9A-Z])(?=[A-Z][a-z])", "_", name).lower()
