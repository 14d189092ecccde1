"""Validate a generic draft against the module it was captured from, on CPU, bit for bit.

The module is copied to CPU with seeded weights at realistic scales; the reference gets the same
weights. At each capture size other than the traced one (two of them), the draft's own `get_inputs`
draws the block's inputs, the module runs on them in its recorded call (non-tensor arguments as
recorded), and both run in float32 and in bfloat16. Outputs must be `torch.equal`: the reference is the
module's own operator sequence, so any difference is a capture bug, not rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils import _pytree as pytree

from solbench.extract.capture import flat_tensors
from solbench.extract.codegen import Generated
from solbench.extract.copies import cpu_copy
from solbench.extract.draft import Draft
from solbench.extract.generic import Block
from solbench.extract.threads import threads_for
from solbench.extract.validate import Validation, one_thread
from solbench.extract.workloads import axis_values

DTYPES = (torch.float32, torch.bfloat16)
DRAW_KEPT = "_draw_kept_inputs"  # the draft's `get_inputs` cut to the inputs a comparison draws


def check(draft: Draft, block: Block, gen: Generated) -> Validation:
    """Compare the draft with its module at capture points 1.. in float32 and bfloat16."""
    result = Validation(draft.name)
    namespace: dict = {}
    exec(compile(draft.reference(), f"<reference {draft.name}>", "exec"), namespace)
    captured = draft.capture_points or []
    points = {}  # call index -> its var axes: the sizes each call was recorded at, never workload sizes
    for index, axes in enumerate(captured[1:], start=1):
        if axes not in points.values() and _fits(draft, gen, block.calls[index], axes):
            points[index] = axes
    if not points and captured and _fits(draft, gen, block.calls[0], captured[0]):
        points = {0: captured[0]}  # the export fixed a size the calls vary (a loop over it): the traced call only
        result.message = "compared at the traced size only: the module's code fixes a size its calls vary; "
    elif not points:  # no size the module was called at has the reference's shapes: nothing was compared
        result.passed = False
        result.message = "no capture size has the shapes the reference declares; "
        return result
    elif len(points) < 2:
        result.message = f"compared at {len(points)} size(s) other than the traced one (static shapes)"
    draws = Draws(namespace, draft, gen)
    with one_thread(threads_for(block.module, block.calls)):
        for dtype in DTYPES:
            label = str(dtype).removeprefix("torch.")
            try:
                module = cpu_copy(block.module, dtype)
                # The reference is handed tensors that need no gradient; a module parameter that needs one
                # changes the path of some operators even under no_grad (a linear on a non-contiguous input
                # then multiplies batch by batch instead of copying and multiplying once, and rounds apart).
                module.requires_grad_(False)
                params = dict(module.named_parameters()) | dict(module.named_buffers())
                exact = True
                for index, axes in points.items():
                    exact &= _compare_once(namespace, draws.at(index, axes), block, gen, module, params, index,
                                           dtype, getattr(torch, draft.dtype))
            except Exception as exc:  # noqa: BLE001 - a failing comparison is a failed validation, reported
                result.passed = False
                result.message += f"{label}: {type(exc).__name__}: {str(exc)[:200]}; "
                continue
            result.exact[label] = exact
            if not exact:
                result.passed = False
                result.message += f"{label}: outputs differ from the module; "
    return result


class Draws:
    """The block's inputs drawn by the draft's own `get_inputs` recipes, once per size (seeded by the call
    index) and shared by the float32 and bfloat16 comparisons; only the inputs the module is called with are
    drawn (parameters come from the module's copy). Drawing a large block's weights again for each dtype,
    then for each size, cost as much as a comparison (a 0.56 G-parameter decoder layer: about 4 s a draw)."""

    def __init__(self, namespace: dict, draft: Draft, gen: Generated, keep: set[str] | None = None):
        self.namespace, self.draft = namespace, draft
        self.keep = keep if keep is not None else {inp.name for inp in gen.inputs if inp.kind == "user"}
        self.drawn: dict[int, dict[str, torch.Tensor]] = {}

    def at(self, index: int, axes: dict[str, int]) -> dict[str, torch.Tensor]:
        if index not in self.drawn:
            if DRAW_KEPT not in self.namespace:
                exec(compile(self.draft.get_inputs_source(self.keep, DRAW_KEPT), f"<inputs {self.draft.name}>",
                             "exec"), self.namespace)
            torch.manual_seed(index)
            drawn = self.namespace[DRAW_KEPT](axis_values(self.draft, axes), "cpu")
            self.drawn[index] = {name: value for name, value in drawn.items() if name in self.keep}
        return {name: value.clone() for name, value in self.drawn[index].items()}  # a module may write into one


def _compare_once(namespace: dict, drawn: dict[str, torch.Tensor], block: Block, gen: Generated, module,
                  params: dict, index: int, dtype: torch.dtype, block_dtype: torch.dtype) -> bool:
    call = block.calls[index]
    leaves, tree = pytree.tree_flatten((call.args, call.kwargs))
    tensor_at = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    real = recorded_as_loaded(leaves, gen, dtype, block_dtype)
    inputs = {}
    for inp in gen.inputs:
        if inp.kind == "user":
            value = drawn[inp.name]
            want = leaves[tensor_at[inp.target]]
            if value.is_floating_point() and (dtype == torch.float32 or want.dtype == block_dtype):
                value = value.to(dtype)  # an input the model passes in another dtype (fp32 residual) stays so
            if tuple(value.shape) != tuple(want.shape):
                raise ValueError(f"get_inputs gives {inp.name} {tuple(value.shape)}, the model passes "
                                 f"{tuple(want.shape)}")
            real[tensor_at[inp.target]] = value
        else:
            value = params[str(inp.target)].detach()
        inputs[inp.name] = value
    args, kwargs = pytree.tree_unflatten(real, tree)
    with torch.no_grad():
        want = flat_tensors(module(*args, **kwargs))
        got = namespace["run"](**inputs)
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    return len(got) == len(want) and all(g.shape == w.shape and g.dtype == w.dtype and torch.equal(g, w)
                                         for g, w in zip(got, want))


SDPA_CALL = "F.scaled_dot_product_attention("
MATH_ATTENTION = '''def math_attention(*args, **kwargs):
    """Attention on SDPA's math path, as the module pins it (the fused kernels round differently)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(*args, **kwargs)


'''


def with_math_attention(draft: Draft, block: Block, gen: Generated, name: Callable[[], str]) -> Validation | None:
    """A module may pin SDPA's math backend inside its forward (granite-speech's conformer attention); export
    keeps the call, not the pin, and the fused CPU kernel differs from it by rounding. The draft is checked
    again with the pin written into its reference: kept (renamed by `name()`, as its code changed) if it then
    matches."""
    original = draft.code
    draft.code = MATH_ATTENTION + draft.code.replace(SDPA_CALL, "math_attention(")
    result = check(draft, block, gen)
    if not result.passed:
        draft.code = original
        return None
    draft.name = name()
    result.problem = draft.name
    result.message += "SDPA's math path pinned, as in the module; "
    return result


def recorded_as_loaded(leaves: list, gen: Generated, dtype: torch.dtype, block_dtype: torch.dtype) -> list:
    """A recorded call's leaves as the model loaded in `dtype` would pass them, where the reference's dtypes
    follow its inputs (an input carries the model's dtype): a tensor the reference does not read (a zero
    filled stand-in; the module may still read its dtype: Qwen-Image casts its timestep embedding to its
    hidden states') and a dtype argument (diffusers' `hidden_dtype`) that were the model's are `dtype`. Where the
    reference writes dtypes literally (a rotary table: positions and frequencies in, no input in the model's
    dtype), they stay as recorded, as the reference's casts do."""
    follows = any(isinstance(i.value, torch.Tensor) and i.value.dtype == block_dtype for i in gen.inputs)
    swap = {block_dtype: dtype} if follows else {}
    return [torch.zeros(x.shape, dtype=swap.get(x.dtype, x.dtype)) if isinstance(x, torch.Tensor) else
            swap.get(x, x) if isinstance(x, torch.dtype) else x for x in leaves]


def _fits(draft: Draft, gen: Generated, call, axes: dict[str, int]) -> bool:
    """Whether the draft's inputs at `axes` have the shapes the module was called with."""
    try:
        values = axis_values(draft, axes)
    except Exception:  # noqa: BLE001 - an axis the point lacks: it does not fit
        return False
    tensors = [x for x in call.leaves() if isinstance(x, torch.Tensor)]
    for arg, inp in zip(draft.inputs, gen.inputs):
        if inp.kind == "user":
            shape = tuple(int(e) if e.isdigit() else values.get(e, -1) for e in arg.shape)
            if shape != tuple(tensors[inp.target].shape):
                return False
    return True
