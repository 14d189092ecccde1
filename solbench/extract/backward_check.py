"""Validate a backward reference against autograd of the module it came from, on CPU.

At each capture size other than the traced one, the backward draft's own `get_inputs` draws the block's
inputs and the output gradients; the module (a seeded CPU copy, its weights passed to the reference) runs
in its recorded call with autograd on, and `torch.autograd.grad` gives the gradients the reference must
return.

- float32: every gradient within `FP32_LIMIT` of autograd's, measured as the largest absolute difference
  divided by the largest magnitude of autograd's gradient (a scale-relative error: a weight gradient
  sums over every token, so its size grows with the shape and a plain absolute bound would not mean the
  same thing at two shapes).
- bfloat16: the gradients must be bit-exact; where they are not, the validation fails and says by how much.

In both the module runs SDPA on its math path, the one the reference was traced through (CPU's fused
kernel differs from it by rounding, ~1e-6 of scale in float32), so the operator sequences are the same.

A block whose forward runs under `no_grad` (a rotary embedding's table) gives autograd nothing to compare
with; its gradients are compared with autograd of its forward reference (validated bit for bit against
the module), and the message says so.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch.utils import _pytree as pytree

from solbench.extract import backward
from solbench.extract.built import BuiltModel
from solbench.extract.capture import axis_points, flat_tensors
from solbench.extract.codegen import Generated
from solbench.extract.copies import cpu_copy
from solbench.extract.draft import Draft
from solbench.extract.generic import Block, symbol_axes
from solbench.extract.generic_check import Draws, recorded_as_loaded
from solbench.extract.threads import threads_for
from solbench.extract.validate import Validation, one_thread

FP32_LIMIT = 1e-6


def check(traced: backward.Traced, forward: Draft, block: Block, gen: Generated) -> Validation:
    """Compare the backward reference with autograd at capture points 1.. in float32 and bfloat16."""
    bdraft = traced.draft
    result = Validation(bdraft.name)
    namespace: dict = {}
    exec(compile(bdraft.reference(), f"<reference {bdraft.name}>", "exec"), namespace)
    fwd_namespace: dict = {}
    exec(compile(forward.reference(), f"<reference {forward.name}>", "exec"), fwd_namespace)
    captured = bdraft.capture_points or []
    points = {i: axes for i, axes in enumerate(captured) if i > 0 and axes not in captured[:i]}
    if len(points) < 2:
        result.message = f"compared at {len(points)} size(s) other than the traced one; "
    # the backward's own inputs that are not parameters: the output gradients and the block's inputs
    draws = Draws(namespace, bdraft, gen, {a.name for a in bdraft.inputs} - {
        inp.name for inp in gen.inputs if inp.kind != "user"})
    with one_thread(threads_for(block.module, block.calls)):
        for dtype in (torch.float32, torch.bfloat16):
            label = str(dtype).removeprefix("torch.")
            try:
                module = cpu_copy(block.module, dtype)
                worst, judged = 0.0, False
                for index, axes in points.items():
                    error, by_float64 = _compare(draws.at(index, axes), fwd_namespace, namespace, traced, block,
                                                 gen, module, index, dtype, result)
                    worst, judged = max(worst, error), judged or by_float64
            except Exception as exc:  # noqa: BLE001 - a failing comparison is a failed validation, reported
                result.passed = False
                result.message += f"{label}: {type(exc).__name__}: {str(exc)[:200]}; "
                continue
            result.max_abs_error[label] = worst
            result.exact[label] = worst == 0.0 and not judged
            if dtype == torch.float32 and worst > FP32_LIMIT:
                result.passed = False
                result.message += f"float32: gradients off by {worst:.2e} of their scale (limit {FP32_LIMIT:g}); "
            elif dtype != torch.float32 and worst != 0.0:
                result.passed = False
                result.message += f"{label}: gradients not bit-exact ({worst:.2e} of their scale); "
    if not points:
        result.passed = False
        result.message += "no capture size to compare at; "
    return result


def _compare(drawn: dict, fwd_namespace: dict, namespace: dict, traced: backward.Traced, block: Block,
             gen: Generated, module, index: int, dtype: torch.dtype, result: Validation) -> tuple[float, bool]:
    """The worst scale-relative error of the reference's gradients against autograd's at one size, and
    whether a gradient was judged against float64 autograd instead (`as_close_as_autograd`)."""
    bdraft = traced.draft
    if dtype == torch.float32:
        drawn = {k: v.float() if v.is_floating_point() else v for k, v in drawn.items()}
    forward_inputs, wrt = _forward_inputs(module, gen, traced, drawn)
    grads_in = {k: drawn[f"grad_{gen.outputs[k][0]}"] for k in traced.received}
    want = _autograd_module(module, block, gen, forward_inputs, index, dtype, getattr(torch, bdraft.dtype), wrt,
                            grads_in)
    if want is None:
        with torch.enable_grad():
            outs = fwd_namespace["run"](**forward_inputs)
        want = _grads(list(outs) if isinstance(outs, (tuple, list)) else [outs], wrt, grads_in)
        if want is None:
            raise ValueError("neither the module nor its forward reference gives a gradient")
        if "no_grad" not in result.message:
            result.message += "the module computes under no_grad: compared with autograd of its forward reference; "
    call = {a.name: drawn[a.name] if a.name not in forward_inputs else forward_inputs[a.name].detach()
            for a in bdraft.inputs}
    with torch.no_grad():
        got = namespace["run"](**call)
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    if len(got) != len(want):
        raise ValueError(f"{len(got)} gradients returned, autograd gives {len(want)}")
    worst, exact, judged = 0.0, None, False
    limit = FP32_LIMIT if dtype == torch.float32 else 0.0
    names = [gen.inputs[i].name for i in traced.differentiated]
    for number, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            raise ValueError(f"a gradient is {tuple(g.shape)} {g.dtype}, autograd's {tuple(w.shape)} {w.dtype}")
        if torch.equal(g, w):
            continue
        scale = max(w.abs().max().item(), torch.finfo(torch.float32).tiny)
        error = (g.float() - w.float()).abs().max().item() / scale
        if error > limit:
            if exact is None:  # once per size: [] where the module gives no float64 gradients
                exact = _float64_grads(module, block, gen, forward_inputs, traced, index,
                                       getattr(torch, bdraft.dtype), grads_in) or []
                exact = exact if len(exact) == len(want) else []
            if exact and as_close_as_autograd(g, w, exact[number]):
                judged = True
                note = f"{names[number]}: autograd's own {str(dtype).removeprefix('torch.')} gradient is rounding noise"
                if note not in result.message:
                    result.message += f"{note} (zero in exact arithmetic): compared with float64 autograd; "
                continue
        worst = max(worst, error)
    return worst, judged


def as_close_as_autograd(got: torch.Tensor, want: torch.Tensor, exact: torch.Tensor) -> bool:
    """Whether a gradient that autograd itself cannot resolve in its dtype is as close to the float64 gradient
    as autograd's is. A gradient that is zero in exact arithmetic (a key projection's bias under softmax: a
    constant added to a row of scores changes nothing) is a sum of terms that cancel, and both autograd's
    result and the reference's are rounding noise, so comparing them relative to their own size means
    nothing. Used only where autograd's gradient has no significant digit (it is further from the float64
    gradient than that gradient's own largest magnitude); the reference must then be within twice
    autograd's distance. Everywhere else autograd stays the yardstick, bit for bit in bfloat16."""
    exact = exact.double()
    autograd_off = (want.double() - exact).abs().max().item()
    if autograd_off <= exact.abs().max().item():
        return False  # autograd resolves this gradient
    return (got.double() - exact).abs().max().item() <= 2 * autograd_off


def _float64_grads(module, block: Block, gen: Generated, forward_inputs: dict, traced: backward.Traced,
                   index: int, block_dtype: torch.dtype, grads_in: dict) -> list | None:
    """Autograd of the module in float64, on the very values compared (weights, inputs and output
    gradients upcast); None where the module does not run in float64."""
    try:
        module64 = copy.deepcopy(module).double()
        users = {inp.name: forward_inputs[inp.name].detach() for inp in gen.inputs if inp.kind == "user"}
        inputs, wrt = _forward_inputs(module64, gen, traced,
                                      {k: v.double() if v.is_floating_point() else v for k, v in users.items()})
        upcast = {k: g.double() for k, g in grads_in.items()}
        return _autograd_module(module64, block, gen, inputs, index, torch.float64, block_dtype, wrt, upcast)
    except Exception:  # noqa: BLE001 - no float64 run: the plain comparison stands
        return None


def _forward_inputs(module, gen: Generated, traced: backward.Traced, drawn: dict) -> tuple[dict, list]:
    """The forward's inputs by name (the drawn values for the user's, the module's own tensors for its
    parameters and buffers), those differentiated marked for autograd, and those in `traced.differentiated`'s
    order."""
    params = dict(module.named_parameters()) | dict(module.named_buffers())
    inputs = {}
    for number, inp in enumerate(gen.inputs):
        value = drawn[inp.name].detach() if inp.kind == "user" else params[str(inp.target)]
        inputs[inp.name] = value.requires_grad_(number in traced.differentiated)
    return inputs, [inputs[gen.inputs[i].name] for i in traced.differentiated]


def _autograd_module(module, block: Block, gen: Generated, forward_inputs: dict, index: int, dtype: torch.dtype,
                     block_dtype: torch.dtype, wrt: list, grads_in: dict) -> list | None:
    """The module's own gradients in its recorded call; None when its outputs carry none (no_grad)."""
    call = block.calls[index]
    leaves, tree = pytree.tree_flatten((call.args, call.kwargs))
    tensor_at = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    real = recorded_as_loaded(leaves, gen, dtype, block_dtype)
    for inp in gen.inputs:
        if inp.kind == "user":
            real[tensor_at[inp.target]] = forward_inputs[inp.name]
    args, kwargs = pytree.tree_unflatten(real, tree)
    with torch.enable_grad(), backward.math_attention():
        outs = flat_tensors(module(*args, **kwargs))
    return _grads(outs, wrt, grads_in)


def _grads(outs: list, wrt: list, grads_in: dict) -> list | None:
    """Gradients of `wrt` (those that get one, in order) from `grads_in` (output index -> its gradient)."""
    pairs = [(outs[k], g) for k, g in grads_in.items() if outs[k].requires_grad]
    if not pairs:
        return None
    grads = torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True)
    return [g for g in grads if g is not None]


@dataclass
class Derived:
    """The outcome for one block of a backward kind: a validated draft, or the reason there is none."""

    draft: Draft | None
    validation: Validation | None
    reason: str = ""


def derive(built: BuiltModel, block: Block, forward: Draft, gen: Generated, dtype: torch.dtype, validate: bool,
           flags: dict[str, dict[str, list[bool]]]) -> Derived | None:
    """The backward problem of a validated forward draft; None for a block of no backward kind.

    `flags` caches the model's gradient flags (`backward.grad_flags`) across the blocks of one model."""
    if not backward.kind_of(block):
        return None
    try:
        if "paths" not in flags:
            flags["paths"] = backward.grad_flags(built, axis_points(built)[0], dtype)
        how = backward.plan(block, forward, gen, block.grad_flags_in(flags["paths"]))
        axis_of = {symbol: axis.name for symbol, axis in symbol_axes(gen, block, axis_points(built)).items()}
        traced = backward.backward_draft(forward, block, gen, how, dtype, axis_of)
    except Exception as exc:  # noqa: BLE001 - one block's backward failing must not stop the model; reported
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        return Derived(None, None, f"backward not traced: {type(exc).__name__}: {first}")
    if not validate:
        return Derived(traced.draft, None)
    validation = check(traced, forward, block, gen)
    if not validation.passed:
        return Derived(None, validation, f"backward failed validation: {validation.message.strip()}")
    return Derived(traced.draft, validation)
