"""Whether a block's export, traced at a capture size, does at a far size exactly what the module does there.

`blocks._draft` must know that a reference traced at a small size is still right past the model's largest
sizes (export may bake in what it derived from the traced size: Mamba2's chunk count). It used to export
the block again, dynamic, at a far size and compare the generated code. A dynamic export spends most of its
time in symbolic-shape reasoning: over Wan2.2's blocks, 4.8x the time of static exports of the same calls.

The check here asks the same question more directly, for a fifth of the cost: export the module statically
at the far call (what the module's own code does at that size, every size a literal), then run the traced
export's graph on meta tensors of the far call's shapes (its size arithmetic evaluated at those sizes, its
range constraints and runtime asserts checked) and compare the two, operation by operation: same operator,
same arguments once evaluated, same tensors feeding it. Equal means the traced code does at the far size
what the module does, which is what equal generated code meant. Anything else (a graph that fails or
asserts at the far size, a size outside its range constraints, another operator sequence, another literal)
answers "unknown", and the dynamic far exports decide as before. Over `extract --all` the files written are
byte-identical to those the dynamic far exports gave (docs/extract.md).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from solbench.extract.capture import Call, _to_meta
from solbench.extract.generic import Block

_SIZE_QUERIES = {torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int, torch.ops.aten.sym_numel.default,
                 torch.ops.aten.sym_storage_offset.default}
_SCALAR_FUNCTIONS = {torch.sym_float, torch.sym_int, torch.sym_max, torch.sym_min, torch.sym_not, torch.sym_ite,
                     torch.sym_sqrt}


def confirms(block: Block, call: Call, traced: ExportedProgram, export_static: Callable[[], ExportedProgram]) -> bool:
    """Whether `traced`, the block's export at its first call, does at the far `call` what the module does
    there (`export_static()`, its static export at `call`). False where the far call has other inputs (a
    VAE's frame cache filled further along) or does not export: the dynamic far exports decide."""
    def tensors_at(one: Call) -> list[bool]:
        return [isinstance(x, torch.Tensor) for x in one.leaves()]
    if tensors_at(call) != tensors_at(block.calls[0]):
        return False
    try:
        static = export_static()
    except Exception:  # noqa: BLE001 - no static trace at that size: unknown
        return False
    return same_operations(traced, static, tuple(x for x in call.leaves() if isinstance(x, torch.Tensor)))


def same_operations(traced: ExportedProgram, far: ExportedProgram, inputs: tuple[torch.Tensor, ...]) -> bool:
    """Whether `traced` (a dynamic export), run at the shapes of `inputs` (the user inputs of the static
    export `far`, meta tensors), performs `far`'s operations in the same order on the same arguments."""
    try:
        if not _inputs_fit(traced, inputs):
            return False
        return _operations(traced, inputs) == _operations(far, inputs)
    except Exception:  # noqa: BLE001 - the traced graph does not run at this size, or cannot be read: unknown
        return False


def _inputs_fit(ep: ExportedProgram, inputs: tuple[torch.Tensor, ...]) -> bool:
    """The user inputs' shapes satisfy the export's symbolic input shapes: each symbol one value, inside its
    range constraint (what `ep.module()` checks before it runs)."""
    users = [spec.arg.name for spec in ep.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT]
    if len(users) != len(inputs):
        return False
    nodes = {node.name: node for node in ep.graph.nodes if node.op == "placeholder"}
    bound: dict[sympy.Symbol, int] = {}
    derived: list[tuple[sympy.Expr, int]] = []
    for name, value in zip(users, inputs):
        fake = nodes[name].meta.get("val")
        if not isinstance(fake, torch.Tensor) or fake.dim() != value.dim() or fake.dtype != value.dtype:
            return False
        for size, real in zip(fake.shape, value.shape):
            if isinstance(size, torch.SymInt):
                expr = size.node.expr
                if isinstance(expr, sympy.Symbol) and bound.setdefault(expr, int(real)) == int(real):
                    continue
                derived.append((expr, int(real)))
            elif int(size) != int(real):
                return False
    for expr, real in derived:
        value = expr.xreplace(bound)
        if value.free_symbols or int(value) != real:
            return False
    for symbol, value in bound.items():
        limits = ep.range_constraints.get(symbol)
        if limits is not None and not (limits.lower <= value <= limits.upper):
            return False
    return True


def _operations(ep: ExportedProgram, inputs: tuple[torch.Tensor, ...]) -> list[tuple]:
    """Each tensor operation of `ep`'s graph, run on meta tensors: (operator, arguments), size arithmetic
    evaluated to numbers and tensors named by the operation (or input) that made them."""
    values = _placeholder_values(ep, inputs)
    return _Recorder(ep.graph_module).record(values)


def _placeholder_values(ep: ExportedProgram, inputs: tuple[torch.Tensor, ...]) -> list[Any]:
    found, users = [], iter(inputs)
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            found.append(next(users))
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            found.append(_to_meta(ep.state_dict.get(spec.target, ep.constants.get(spec.target))))
        else:  # a token: effects ordering, nothing to compare
            raise ValueError("an input kind the comparison does not read")
    return found


def _is_size_arithmetic(node: fx.Node) -> bool:
    target = node.target
    if target in _SIZE_QUERIES or target in _SCALAR_FUNCTIONS:
        return True
    if getattr(target, "__module__", None) in ("_operator", "operator", "math") and target is not operator.getitem:
        return True
    if isinstance(target, torch._ops.OpOverload):  # checks: _assert_scalar, _assert_tensor_metadata, ...
        name = target._schema.name.removeprefix("aten::")
        return name.startswith(("_assert", "sym_constrain_range", "_check"))
    return False


class _Recorder(fx.Interpreter):
    """Runs a graph, noting each tensor operation with its evaluated arguments."""

    def __init__(self, module: fx.GraphModule):
        super().__init__(module)
        self.ops: list[tuple] = []
        self.names: dict[fx.Node, tuple] = {}

    def record(self, placeholders: list[Any]) -> list[tuple]:
        self.run(*placeholders)
        return self.ops

    def run_node(self, node: fx.Node) -> Any:
        value = super().run_node(node)
        if node.op == "placeholder":
            self.names[node] = ("input", len(self.names))
        elif node.op == "call_function" and not _is_size_arithmetic(node):
            if node.target is torch.ops.aten.alias.default or (node.target is torch.ops.aten.slice.Tensor
                                                                and self._whole(node, value)):
                self.names[node] = self.names[node.args[0]]  # `x[:, :]`: dropped, or an alias, by each trace
                return value
            args = _slice_args(node.args) if node.target is torch.ops.aten.slice.Tensor else node.args
            self.ops.append((str(node.target), self._normal(args), self._normal(node.kwargs), _shapes(value)))
            self.names[node] = ("op", len(self.ops) - 1)
        elif node.op == "output":
            self.ops.append(("output", self._normal(node.args)))
        elif node.op != "call_function":  # get_attr, call_module: a submodule the check does not read
            raise ValueError(f"a {node.op} node")
        return value

    def _whole(self, node: fx.Node, value: Any) -> bool:
        """A slice that keeps the whole tensor (start 0, step 1, same shape) at this size."""
        source, _, start, _, step = _slice_args(node.args)
        start = self.env[start] if isinstance(start, fx.Node) else start
        return (source in self.names and start == 0 and step == 1
                and tuple(value.shape) == tuple(self.env[source].shape))

    def _normal(self, value: Any) -> Any:
        if isinstance(value, fx.Node):
            return self.names[value] if value in self.names else _number(self.env[value])
        if isinstance(value, (list, tuple)):
            return tuple(self._normal(x) for x in value)
        if isinstance(value, dict):
            return tuple(sorted((k, self._normal(v)) for k, v in value.items()))
        if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return str(value)
        if isinstance(value, (bool, int, float, str)) or value is None:
            return _number(value)
        raise ValueError(f"an argument of type {type(value).__name__}")


def _slice_args(args: tuple) -> tuple:
    """`slice(x, dim, start, end, step)` with its defaults spelled out: a trace may write 0 or None."""
    x, dim, start, end, step = (*args, *(None,) * (5 - len(args)))
    return (x, 0 if dim is None else dim, 0 if start is None else start,
            _END if end is None else end, 1 if step is None else step)


_END = 2**63 - 1  # what `x[a:]` passes as the end


def _number(value: Any) -> Any:
    """A size-derived value as a plain number (a float that is NaN compares equal to itself)."""
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        raise ValueError("a symbolic value left at a concrete size")
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    raise ValueError(f"a value of type {type(value).__name__}")


def _shapes(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), str(value.dtype))
    if isinstance(value, (list, tuple)):
        return tuple(_shapes(x) for x in value)
    return _number(value)
