"""Backward references for generic blocks, traced from the joint forward-backward graph.

A generic block's forward reference is torch code validated bit for bit against its module. Its backward
is traced, not written: `make_fx` records the operators autograd runs for `torch.autograd.grad` of that
forward reference, on the capture's own fake tensors (so the variable axes stay symbolic and the
expression axes keep their names), and `codegen` spells the recorded graph as it spells any forward.
Attention is traced through the math SDPA path: the fused kernels' backward operators are specific to one
device, and a reference must run on any.

The problem follows the official backward problems: inputs are the gradient of each output
(`grad_output`), then the forward's inputs and parameters (the forward is recomputed, nothing saved is
passed in); outputs are `grad_<input>` for each input that carries a gradient in training, then
`grad_<parameter>`. Which inputs carry one is recorded, not guessed: one forward of the whole model on fake
tensors with autograd on says which tensors each block receives are attached to the graph (hidden states
are; masks, position ids and rotary tables made under `no_grad` are not).

Backward problems are emitted for the block kinds the official dataset has backward problems for:
attention, MLP/feed-forward, norms, rotary embeddings, MoE experts and routers, SSM mixers and whole
transformer layers, told apart by the module's class name (`KINDS`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass

import torch
from torch.utils import _pytree as pytree

from solbench.extract import capture, codegen
from solbench.extract.built import BuiltModel
from solbench.extract.draft import Arg, Draft
from solbench.extract.generic import Block

# kind -> words of a module's class name (lower case, no underscores) that make it one; first match wins
# (attention before MoE: a MoE model's attention, `Qwen3MoeAttention`, is attention; a router module, GLM's
# `Glm4MoeTopkRouter`, is a kind of its own: its backward is small where a MoE block's may be billions of weights)
KINDS = (("rotary", ("rotary",)), ("attention", ("attention", "attn")), ("router", ("router", "topk")),
         ("moe", ("moe", "expert")), ("ssm", ("mamba", "mixer", "ssm")),
         ("mlp", ("mlp", "feedforward", "ffn")), ("norm", ("norm",)),
         ("layer", ("decoderlayer", "encoderlayer", "transformerlayer", "transformerblock", "layer")))


@dataclass
class Plan:
    """What the backward of one block differentiates: the forward's inputs by index, and the forward's
    outputs (by index) whose gradients come in."""

    wrt: list[int]  # indices into the forward draft's inputs
    grads_of: list[int]  # indices into the forward draft's outputs
    kind: str


def kind_of(block: Block) -> str:
    """The backward kind of a block ("" when the official dataset has no backward problem of its kind)."""
    name = block.class_name.lower().replace("_", "")
    return next((kind for kind, words in KINDS if any(w in name for w in words)), "")


def grad_flags(built: BuiltModel, axes: dict[str, int], dtype: torch.dtype) -> dict[str, list[bool]]:
    """Per module path, whether each tensor its first call receives is attached to autograd's graph when
    the whole model runs with its parameters trainable (and its floating inputs too: a block may stand
    first in a larger network). One forward on fake tensors: no memory, no compute."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    flags: dict[str, list[bool]] = {}

    def hook_for(path: str):
        def hook(module, args, kwargs):
            if path not in flags:
                flags[path] = [x.requires_grad for x in pytree.tree_leaves((args, kwargs))
                               if isinstance(x, torch.Tensor)]
        return hook

    def trainable(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.detach().requires_grad_(True)
        return x

    model = built.module
    handles = [m.register_forward_pre_hook(hook_for(p), with_kwargs=True) for p, m in model.named_modules()]
    try:
        with capture.quiet(), FakeTensorMode(allow_non_fake_inputs=True), torch.device("meta"), \
                torch.enable_grad():
            args, kwargs = pytree.tree_map(trainable, built.make_call(axes, dtype))
            model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return flags


def plan(block: Block, forward: Draft, gen: codegen.Generated, flags: list[bool] | None) -> Plan:
    """Which inputs to differentiate: user inputs attached to the graph (by `flags`), floating parameters,
    and, for a block with neither (a rotary table), its floating buffers (the official dataset
    differentiates the inverse frequencies)."""
    kind = kind_of(block)
    wrt = []
    for index, inp in enumerate(gen.inputs):
        floating = inp.value.is_floating_point()
        if inp.kind == "user" and floating and flags is not None and inp.target < len(flags) \
                and flags[inp.target]:
            wrt.append(index)
        elif inp.kind == "parameter" and floating:
            wrt.append(index)
    if not wrt:
        wrt = [i for i, inp in enumerate(gen.inputs) if inp.kind == "buffer" and inp.value.is_floating_point()]
    grads_of = [i for i, (_, value) in enumerate(gen.outputs) if value.is_floating_point()]
    return Plan(wrt, grads_of, kind)


class NothingToDifferentiate(Exception):
    """No output of the block depends differentiably on an input it is trained through."""


def joint(forward: Draft, gen: codegen.Generated, how: Plan):
    """The traced backward of `forward`'s reference: (graph, its inputs as `codegen.Input`s, the forward
    inputs (indices) whose gradients it returns, the outputs (indices) whose gradients it takes)."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.nn.attention import SDPBackend, sdpa_kernel

    namespace: dict = {}
    exec(compile(forward.reference(), f"<reference {forward.name}>", "exec"), namespace)
    run = namespace["run"]
    values = [inp.value for inp in gen.inputs]
    fake_mode = detect_fake_mode(values)
    if fake_mode is None:
        raise NothingToDifferentiate("the capture has no fake inputs to trace on")
    order = [i for i, inp in enumerate(gen.inputs) if inp.kind == "user"] + \
        [i for i, inp in enumerate(gen.inputs) if inp.kind != "user"]
    names = [gen.inputs[i].name for i in order]
    differentiated: list[int] = []  # forward input indices, filled while tracing
    received: list[int] = []  # forward output indices

    def backward(*tensors):
        grads_in, ins = tensors[: len(how.grads_of)], tensors[len(how.grads_of):]
        ins = [x.detach().requires_grad_(order[k] in how.wrt) for k, x in enumerate(ins)]
        with torch.enable_grad():
            out = run(**dict(zip(names, ins)))
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        pairs = [(k, out[k], g) for k, g in zip(how.grads_of, grads_in) if out[k].requires_grad]
        wanted = [(order[k], x) for k, x in enumerate(ins) if x.requires_grad]
        if not pairs or not wanted:
            raise NothingToDifferentiate("no output depends on an input it is trained through")
        grads = torch.autograd.grad([o for _, o, _ in pairs], [x for _, x in wanted], [g for _, _, g in pairs],
                                    allow_unused=True)
        received[:] = [k for k, _, _ in pairs]
        differentiated[:] = [i for (i, _), g in zip(wanted, grads) if g is not None]
        if not differentiated:
            raise NothingToDifferentiate("no input it is trained through reaches an output")
        return tuple(g for g in grads if g is not None)

    with fake_mode:
        cpu = [_on_cpu(gen.outputs[k][1]) for k in how.grads_of] + [_on_cpu(values[i]) for i in order]
    # the Python dispatcher lets operators whose C++ kernels need concrete sizes (a pad's backward) run their
    # symbolic-size decompositions, as torch.compile's own joint-graph tracing does
    with fake_mode, sdpa_kernel(SDPBackend.MATH), capture.quiet(), enable_python_dispatcher():
        graph = make_fx(backward)(*cpu)
    _tidy(graph)
    inputs = [codegen.Input(f"grad_{gen.outputs[k][0]}", "grad", k, cpu[n]) for n, k in enumerate(how.grads_of)]
    inputs += [codegen.Input(gen.inputs[i].name, gen.inputs[i].kind, gen.inputs[i].target, gen.inputs[i].value)
               for i in order]
    return graph, inputs, list(differentiated), list(received)


def _on_cpu(value: torch.Tensor) -> torch.Tensor:
    """The same fake tensor (symbolic sizes kept) on the CPU device, contiguous: dispatch then picks what a
    real device would, not the meta device's shortcuts, and what it picks for the contiguous inputs the
    problem draws, not for the recorded call's strides. A linear on a strided view (SAM-HQ's hypernetwork
    MLPs take a slice of the mask tokens) traces as `mm` and `add`, two roundings, where the contiguous
    input the module is checked on runs one `addmm`: bfloat16 activations 1 ulp apart."""
    return torch.empty(value.shape, dtype=value.dtype, device="cpu")


def _tidy(graph: torch.fx.GraphModule) -> None:
    """Spell the recorded graph as a person would: drop `detach` (identity here), `_unsafe_view` and `view`
    as `reshape`, `_softmax(x, dim, False)` as `softmax(x, dim)` (the same kernel), and no variable
    named with a leading underscore."""
    aten = torch.ops.aten
    public = {aten._unsafe_view.default: aten.reshape.default, aten._softmax.default: aten.softmax.int,
              aten._log_softmax.default: aten.log_softmax.int}
    # a `view` the trace saw on a contiguous tensor may meet a strided one: on bfloat16 inputs the math
    # attention path's CPU branch was recorded, whose casts make copies that a float32 run does not
    # (Gemma 3's attention backward failed in float32 with "view size is not compatible"); `reshape` is the
    # same view wherever one is possible
    public[aten.view.default] = aten.reshape.default
    for node in list(graph.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in (aten.detach.default, aten.lift_fresh.default):
            node.replace_all_uses_with(node.args[0])
            graph.graph.erase_node(node)
            continue
        if node.target in public and (node.target in (aten._unsafe_view.default, aten.view.default)
                                      or node.args[2] is False):
            node.target, node.args = public[node.target], tuple(node.args[:2])
    graph.graph.eliminate_dead_code()
    graph.recompile()
    for node in graph.graph.nodes:  # only `codegen` reads the names now (and makes them unique)
        node.name = node.name.lstrip("_") or node.name


@dataclass
class Traced:
    """A backward draft and what its validation needs to know about it."""

    draft: Draft
    differentiated: list[int]  # forward input indices whose gradients `run` returns, in order
    received: list[int]  # forward output indices whose gradients `run` takes, in order


def backward_draft(forward: Draft, block: Block, gen: codegen.Generated, how: Plan, dtype: torch.dtype,
                   axis_of: dict[str, str] | None = None) -> Traced:
    """The backward problem of a validated forward draft: its declarations from the forward's, its `run`
    from the joint graph; its workloads those of the forward at which no tensor of it outgrows
    `MAX_TENSOR_BYTES` (`axis_of`: each size symbol's axis name)."""
    graph, inputs, differentiated, received = joint(forward, gen, how)
    bgen = codegen.generate_graph(graph, dtype, inputs)
    by_name = {arg.name: arg for arg in forward.inputs}
    args = []
    for inp in bgen.inputs:
        if inp.kind == "grad":
            out = forward.outputs[inp.target]
            args.append(Arg(inp.name, out.shape, out.dtype, f"gradient of the block's {out.name}"))
        else:
            args.append(by_name[inp.name])
    outputs = [Arg(f"grad_{forward.inputs[i].name}", forward.inputs[i].shape, forward.inputs[i].dtype,
                   f"gradient of {forward.inputs[i].name}") for i in differentiated]
    if len(outputs) != len(bgen.outputs):
        raise codegen.Unsupported(f"{len(bgen.outputs)} gradients traced for {len(outputs)} inputs")
    names = ", ".join(a.name.removeprefix("grad_") for a in outputs)
    description = (f"Backward of {block.class_name}: the gradients of {names} from the "
                   f"gradient of its output(s), the forward recomputed; traced from the joint "
                   f"forward-backward graph of the validated forward reference {forward.name}.")
    draft = Draft(name="", op_type=f"{forward.op_type}_backward", description=description, axes=dict(forward.axes),
                  inputs=args, outputs=outputs, code=bgen.code, shapes="", dtype=forward.dtype,
                  workload_points=forward.workload_points, versions=dict(forward.versions),
                  hints={**forward.hints, "backward_of": forward.name, "backward_kind": how.kind},
                  capture_points=forward.capture_points)
    if axis_of:
        draft.workload_points, dropped = fitting_points(draft.workload_points, graph, axis_of)
        if dropped:
            draft.hints["workloads_left_out"] = left_out_note(dropped)
    identity = json.dumps([draft.code, draft.axes, [a.to_dict() for a in draft.inputs],
                           [a.to_dict() for a in draft.outputs]], sort_keys=True, default=str)
    dtype_suffix = forward.name[len(forward.op_type) + 11:]  # forward names: <op_type>_<10 hex><suffix>
    draft.name = f"{draft.op_type}_{hashlib.sha256(identity.encode()).hexdigest()[:10]}{dtype_suffix}"
    kept = [inp.target for inp in bgen.inputs if inp.kind == "grad"]
    return Traced(draft, differentiated, [k for k in received if k in kept])


# A backward traced on SDPA's math path holds the attention scores (batch x heads x seq x seq, in float32) and
# their gradients: Qwen3-4B's layer backward at 8 x 4096 tokens asked for 16 GiB more with 124 GiB of an
# H200 in use (the reference and the solution both run). Sizes at which one tensor of the reference passes
# this are not emitted as workloads of a backward problem; the forward (fused attention) keeps them.
MAX_TENSOR_BYTES = 4 * 2**30


def fitting_points(points: list[dict[str, int]], graph: torch.fx.GraphModule,
                   axis_of: dict[str, str]) -> tuple[list[dict[str, int]], list[tuple[dict[str, int], int]]]:
    """(the points at which every tensor the graph makes stays within MAX_TENSOR_BYTES, the others with the
    largest tensor's bytes there, largest first). A size no axis names leaves the point kept."""
    import sympy

    sizes = []
    for node in graph.graph.nodes:
        for value in pytree.tree_leaves(node.meta.get("val")):
            if isinstance(value, torch.Tensor):
                numel = value.numel()
                expr = numel.node.expr if isinstance(numel, torch.SymInt) else sympy.Integer(int(numel))
                sizes.append(expr * value.element_size())
    kept, dropped = [], []
    for point in points:
        largest = 0
        for expr in sizes:
            values = {sym: point.get(axis_of.get(str(sym), ""), None) for sym in expr.free_symbols}
            if any(v is None for v in values.values()):
                continue
            largest = max(largest, int(expr.subs(values)))
        (kept.append(point) if largest <= MAX_TENSOR_BYTES else dropped.append((point, largest)))
    return kept, sorted(dropped, key=lambda d: -d[1])


def left_out_note(dropped: list[tuple[dict[str, int], int]]) -> str:
    """What `fitting_points` left out, for the definition's hints."""
    named = ", ".join(" x ".join(f"{axis} {value}" for axis, value in point.items()) for point, _ in dropped[:3])
    return (f"{len(dropped)} of the forward's sizes ({named}{', ...' if len(dropped) > 3 else ''}): the reference "
            f"makes a tensor of up to {dropped[0][1] / 2**30:.1f} GiB there (limit {MAX_TENSOR_BYTES // 2**30} GiB)")


@contextlib.contextmanager
def math_attention():
    """SDPA on its math path: the operator sequence the backward reference was traced with."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        yield
