"""Turn an exported block's graph into a readable, standalone `run()` at torch / `F` level.

The export graph is already the right level (pre-dispatch ATen keeps `linear`, `conv2d`,
`scaled_dot_product_attention`, `group_norm` whole); this pass only spells it as a person would:
every aten operator as its public `torch.*` / `F.*` function or tensor method, slices as subscripts,
parameters named after their module path, the device and dtype taken from the inputs instead of the
meta device and dtype the capture ran on, private asserts dropped, unused inputs pruned. An operator
with no public spelling keeps `torch.ops.aten.*` (never silently changed).
"""

from __future__ import annotations

import keyword
import math
import operator
import re
from dataclasses import dataclass, field

import torch
from torch import fx

DROPPED = {"_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size", "_assert_async",
           "sym_constrain_range"}
# aten operators whose `torch.nn.functional` spelling takes the same arguments and reads better
FUNCTIONAL = {"linear", "scaled_dot_product_attention", "gelu", "silu", "softplus", "pad", "conv1d", "conv2d",
              "conv3d", "mish", "elu", "leaky_relu", "hardtanh", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "avg_pool2d", "max_pool2d", "upsample_nearest2d", "glu"}
# shape and dtype plumbing reads best as a tensor method
METHODS = {"view", "expand", "contiguous", "to", "reshape", "permute", "transpose", "unsqueeze", "squeeze",
           "flatten", "unflatten", "repeat", "type_as", "masked_fill", "float", "clone", "t", "chunk",
           "split", "expand_as", "view_as", "reshape_as", "repeat_interleave", "unbind", "split_with_sizes"}
SYM_OPERATORS = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.floordiv: "//",
                 operator.truediv: "/", operator.mod: "%", operator.pow: "**", operator.eq: "==",
                 operator.ne: "!=", operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">="}
HIGHER_ORDER_INLINE = {"wrap_with_set_grad_enabled": 1, "wrap_with_autocast": 4}  # index of the subgraph
RESERVED = {"torch", "F", "math", "device", "dtype", "run", "inputs", "get_inputs", "a"}


@dataclass(frozen=True)
class _Raw:
    """Source text spliced into a call as one argument."""

    text: str


def _written(node) -> bool:
    """Whether an in-place operator writes into this node's tensor: a copy of it is then a real copy (a
    backward trace reads the copy autograd saved before `topk_weights /= denominator`), not an alias."""
    if not isinstance(node, fx.Node):
        return False
    for user in node.users:
        schema = getattr(user.target, "_schema", None)
        if schema is not None and schema.arguments and user.args and user.args[0] is node:
            alias = schema.arguments[0].alias_info
            if alias is not None and alias.is_write:
                return True
    return False


def _storage_written(node) -> bool:
    """Whether an in-place operator writes into any tensor sharing this node's storage: its view chain up
    to the base and every view of that base. Gemma 3n copies `corrected[0].clone()` and then adds into
    `corrected[1:]`: without the copy, the row autograd saved would share the written tensor's version."""
    if not isinstance(node, fx.Node):
        return False
    while _is_view(node):
        node = node.args[0]
    seen, todo = set(), [node]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if _written(current):
            return True
        todo += [user for user in current.users if _is_view(user) and user.args[0] is current]
    return False


def _is_view(node) -> bool:
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.returns or not node.args or not isinstance(node.args[0], fx.Node):
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


class Unsupported(Exception):
    """The block's graph has something no standalone reference can express; the message says what."""


@dataclass
class Input:
    """One input of the emitted `run`: a parameter/buffer (by module path) or a user input (by leaf)."""

    name: str
    kind: str  # "parameter" | "buffer" | "user"
    target: str | int  # parameter path, or the index of the user input among the call's leaves
    value: object  # the placeholder's fake value (shape with symbols, dtype)


@dataclass
class Generated:
    code: str
    inputs: list[Input] = field(default_factory=list)
    outputs: list[tuple[str, object]] = field(default_factory=list)  # (name, fake value)


def generate(ep, capture_dtype: torch.dtype, user_names: list[str]) -> Generated:
    """`run(<inputs>)` source for an ExportedProgram, its inputs in order and its outputs.

    `user_names` names the user inputs in order; parameter and buffer targets lose the `block.` prefix
    that `block_export.export_block` adds."""
    from torch.export.graph_signature import InputKind, OutputKind

    graph = ep.graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    writer = _Writer(ep.graph_module, capture_dtype)
    inputs: list[Input] = []
    user_index = 0
    for spec, node in zip(ep.graph_signature.input_specs, placeholders):
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            kind = "parameter" if spec.kind == InputKind.PARAMETER else "buffer"
            target: str | int = spec.target.removeprefix("block.")
            name = writer.unique(str(target).replace(".", "_"))
        elif spec.kind == InputKind.USER_INPUT:
            name, kind, target = writer.unique(user_names[user_index]), "user", user_index
            user_index += 1
        else:
            raise Unsupported(f"input {node.name} is a {spec.kind.name.lower()} (a constant traced on meta)")
        value = node.meta.get("val")
        if not node.users:
            continue
        if not isinstance(value, torch.Tensor):
            writer.names[node] = repr(value)  # a non-tensor input is a constant of this capture
            continue
        writer.names[node] = name
        inputs.append(Input(name, kind, target, value))
    for spec in ep.graph_signature.output_specs:
        if spec.kind != OutputKind.USER_OUTPUT:
            raise Unsupported(f"the block {spec.kind.name.lower().replace('_', ' ')}s {spec.target}")
    return _emit(writer, graph, inputs)


def generate_graph(gm: fx.GraphModule, capture_dtype: torch.dtype, inputs: list[Input]) -> Generated:
    """`run(<inputs>)` source for a plain traced graph (`make_fx`) whose placeholders are `inputs`, in order:
    the same spelling as `generate`, for graphs that are not an export (a joint forward-backward graph)."""
    writer = _Writer(gm, capture_dtype)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise Unsupported(f"{len(placeholders)} graph inputs for {len(inputs)} names")
    kept = []
    for node, inp in zip(placeholders, inputs):
        if node.users:
            writer.names[node] = writer.unique(inp.name)
            kept.append(Input(writer.names[node], inp.kind, inp.target, inp.value))
    return _emit(writer, gm.graph, kept)


def _emit(writer: _Writer, graph: fx.Graph, inputs: list[Input]) -> Generated:
    first = next((i for i in inputs if i.value.dtype == writer.capture_dtype), None)
    if first is None:  # no input carries the capture dtype: dtypes stay literal, the device still follows
        writer.capture_dtype = None
        first = next((i for i in inputs if isinstance(i.value, torch.Tensor)), None)
    if first is None:
        raise Unsupported("no tensor input to take the device from")
    results = [(expr, value) for expr, value in writer.body(graph) if value is not None]
    text = "\n".join(writer.lines)
    header = [f"{var} = {first.name}.{var}" for var in ("device", "dtype") if re.search(rf"\b{var}\b", text)]
    writer.lines[:0] = header
    outputs = []
    names = []
    for index, (expr, value) in enumerate(results):
        if not isinstance(value, torch.Tensor):
            raise Unsupported(f"output {index} is not a tensor ({type(value).__name__})")
        name = "output" if len(results) == 1 else f"output_{index}"
        outputs.append((name, value))
        names.append(expr)
    args = ", ".join(i.name for i in inputs)
    body = "\n".join("    " + line for line in writer.lines)
    code = f"def run({args}):\n{body}\n    return {', '.join(names)}\n"
    return Generated(code, inputs, outputs)


class _Writer:
    def __init__(self, gm: fx.GraphModule, capture_dtype: torch.dtype | None):
        self.gm = gm
        self.capture_dtype = capture_dtype
        self.names: dict[fx.Node, str] = {}
        self.used: set[str] = set(RESERVED)
        self.lines: list[str] = []

    def unique(self, name: str) -> str:
        base = name if name.isidentifier() and not keyword.iskeyword(name) else f"v_{name}"
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name

    def body(self, graph: fx.Graph, module: fx.GraphModule | None = None) -> list[tuple[str, object]]:
        """Lines for every computing node; the output expressions with their fake values."""
        module = module or self.gm
        for node in graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                outs = node.args[0]
                outs = outs if isinstance(outs, (list, tuple)) else (outs,)
                return [(self.arg(o), o.meta.get("val") if isinstance(o, fx.Node) else o) for o in outs]
            if node.op != "call_function":
                raise Unsupported(f"graph node {node.op} {node.target}")
            self.node(node, module)
        raise Unsupported("graph without output")

    def node(self, node: fx.Node, module: fx.GraphModule) -> None:
        target = node.target
        name = getattr(target, "__name__", str(target))
        if isinstance(target, torch._ops.OpOverload) and target._opname in DROPPED:
            return
        if isinstance(target, torch._ops.HigherOrderOperator):
            self.inline(node, name, module)
            return
        if name in ("dropout.default", "dropout") and node.args[2] is False or name.startswith("alias") or \
                (name.startswith("clone") and not node.kwargs and not _written(node) and not _storage_written(node.args[0])):
            self.names[node] = self.arg(node.args[0])  # identity at inference: no line of its own
            return
        expr = self.expression(node)
        out = self.unique(node.name)
        self.names[node] = out
        self.lines.append(f"{out} = {expr}")

    def inline(self, node: fx.Node, name: str, module: fx.GraphModule) -> None:
        """Grad-mode and autocast wrappers only change modes: their body is emitted in place."""
        index = HIGHER_ORDER_INLINE.get(name)
        if index is None:
            raise Unsupported(f"higher-order operator {name}")
        sub = getattr(module, node.args[index].target)
        operands = node.args[index + 1:]
        for ph, operand in zip([n for n in sub.graph.nodes if n.op == "placeholder"], operands):
            self.names[ph] = self.arg(operand)
        results = self.body(sub.graph, sub)
        out = self.unique(node.name)
        self.names[node] = out
        values = ", ".join(expr for expr, _ in results)
        self.lines.append(f"{out} = ({values},)")

    def expression(self, node: fx.Node) -> str:
        target, args, kwargs = node.target, node.args, dict(node.kwargs)
        if target is operator.getitem:
            return f"{self.arg(args[0])}[{self.arg(args[1])}]"
        if target in SYM_OPERATORS:
            return f"{self.arg(args[0])} {SYM_OPERATORS[target]} {self.arg(args[1])}"
        if target is operator.neg:
            return f"-{self.arg(args[0])}"
        if not isinstance(target, torch._ops.OpOverload):
            module = getattr(target, "__module__", "")
            if module.startswith("torch") and hasattr(torch, target.__name__):
                return self.call(f"torch.{target.__name__}", args, kwargs)
            if module == "math":
                return self.call(f"math.{target.__name__}", args, kwargs)
            raise Unsupported(f"call to {module}.{getattr(target, '__name__', target)}")
        op = target._opname
        if op == "index" and target._overloadname == "Tensor":
            subscripts = ", ".join(":" if i is None else self.arg(i) for i in args[1])
            return f"{self.arg(args[0])}[{subscripts}]"
        if op == "sym_size":
            return f"{self.arg(args[0])}.shape[{args[1]}]"
        if op == "sym_numel":
            return f"{self.arg(args[0])}.numel()"
        if op == "slice" and target._overloadname == "Tensor":
            return self.slice(args)
        if op in ("to", "_to_copy"):
            # Tensor.to takes memory_format by keyword only: aten's trailing positionals become keywords
            lead = 3 if target._overloadname == "device" else 2
            extra = dict(zip(("non_blocking", "copy", "memory_format"), args[lead:]))
            kwargs = {k: v for k, v in {**extra, **kwargs}.items() if k not in ("layout", "pin_memory")
                      and v not in (False, None, torch.preserve_format)}
            return self.call(f"{self.arg(args[0])}.to", args[1:lead], kwargs)
        if op == "histc" and not args[0].meta["val"].is_floating_point():
            # traced on meta, a model takes its GPU branch (histc on integers); CPU has only the float one,
            # which counts the same
            return self.call("torch.histc", (_Raw(f"{self.arg(args[0])}.float()"), *args[1:]), kwargs)
        if op == "broadcast_tensors":  # aten takes the list, torch.broadcast_tensors the tensors themselves
            return self.call("torch.broadcast_tensors", args[0], kwargs)
        if op in FUNCTIONAL and hasattr(torch.nn.functional, op):
            return self.call(f"F.{op}", args, kwargs)
        if op in METHODS and hasattr(torch.Tensor, op):
            return self.call(f"{self.arg(args[0])}.{op}", args[1:], kwargs)
        if hasattr(torch, op) and not op.startswith("_"):
            return self.call(f"torch.{op}", args, kwargs)
        if hasattr(torch.Tensor, op) and not op.startswith("_"):
            return self.call(f"{self.arg(args[0])}.{op}", args[1:], kwargs)
        return self.call(f"torch.ops.aten.{op}.{target._overloadname}", args, kwargs)

    def slice(self, args) -> str:
        tensor, dim = self.arg(args[0]), args[1] if len(args) > 1 else 0
        start = args[2] if len(args) > 2 else None
        end = args[3] if len(args) > 3 else None
        step = args[4] if len(args) > 4 else 1
        if isinstance(end, int) and end >= 2**62:
            end = None
        parts = ["" if start in (None, 0) else self.arg(start), "" if end is None else self.arg(end)]
        text = ":".join(parts) + ("" if step == 1 else f":{self.arg(step)}")
        if dim < 0:
            return f"{tensor}[..., {text}{', :' * (-dim - 1)}]"
        return f"{tensor}[{':, ' * dim}{text}]"

    def call(self, fn: str, args, kwargs) -> str:
        parts = [self.arg(a) for a in args] + [f"{k}={self.arg(v)}" for k, v in kwargs.items()]
        return f"{fn}({', '.join(parts)})"

    def arg(self, value) -> str:
        if isinstance(value, _Raw):
            return value.text
        if isinstance(value, fx.Node):
            if value not in self.names:
                raise Unsupported(f"value {value.name} used before it is defined")
            return self.names[value]
        if isinstance(value, (list, tuple)):
            inner = ", ".join(self.arg(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
        if isinstance(value, torch.device):
            return "device"
        if isinstance(value, torch.dtype):
            return "dtype" if value == self.capture_dtype else str(value)
        if isinstance(value, float):
            if math.isinf(value):
                return "math.inf" if value > 0 else "-math.inf"
            if math.isnan(value):
                return "math.nan"
            return repr(value)
        if isinstance(value, (torch.memory_format, torch.layout)):
            return f"torch.{str(value).removeprefix('torch.')}"
        if isinstance(value, (int, bool, str)) or value is None:
            return repr(value)
        raise Unsupported(f"argument of type {type(value).__name__}")
