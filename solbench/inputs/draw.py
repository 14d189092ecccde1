"""One random input's values: the first name heuristic that applies (`heuristics.py`), else plain random
values (`random_tensors.py`, or the profile's), in a new tensor or written into a given one (on a GPU, a
timed call's argument slot). Both ways give the same bits for the same seed: a heuristic with a `fill`
draws in place in both, and `random_tensor` is `fill_random` on an empty tensor.
"""

from __future__ import annotations

import functools

import torch

from solbench.inputs import profiles
from solbench.inputs.heuristics import HEURISTICS, Heuristic, InputContext
from solbench.inputs.random_tensors import fill_random, random_scalar, random_tensor
from solbench.inputs.seeds import derive_seed, make_generator
from solbench.spec import dtypes
from solbench.spec.definition import TensorSpec


def choose(ctx: InputContext) -> Heuristic | None:
    """The first heuristic that applies, or None (plain random values)."""
    if ctx.device.type == "meta":
        return None
    return _choose(ctx.name, ctx.dtype_name, tuple(ctx.shape), ctx.description, ctx.op_type)


@functools.lru_cache(maxsize=4096)
def _choose(name: str, dtype_name: str, shape: tuple[int, ...], description: str, op_type: str | None) -> Heuristic | None:
    """Memoised on what `applies` looks at: a timed block draws every call's inputs anew (on a GPU, a
    thousand sets a second for short calls) and the rules are the same each time."""
    ctx = InputContext(name=name, dtype_name=dtype_name, shape=shape, device=torch.device("cpu"),
                       generator=None, shared_generator=None, description=description, op_type=op_type)  # type: ignore[arg-type]
    return next((h for h in HEURISTICS if h.applies(ctx)), None)


def generate(ctx: InputContext) -> torch.Tensor | None:
    """The heuristic tensor in the declared dtype, or None when no heuristic applies."""
    heuristic = choose(ctx)
    if heuristic is None:
        return None
    if heuristic.fill is not None:
        out = torch.empty(ctx.shape, dtype=dtypes.torch_dtype(ctx.dtype_name), device=ctx.device)
        if heuristic.fill(ctx, out):
            return out
    return _made(heuristic, ctx)


def generate_into(ctx: InputContext, out: torch.Tensor) -> bool:
    """`generate`'s values written into `out` (contiguous, declared dtype and shape); False when no
    heuristic applies (nothing written)."""
    heuristic = choose(ctx)
    if heuristic is None:
        return False
    if heuristic.fill is None or not heuristic.fill(ctx, out):
        out.copy_(_made(heuristic, ctx))
    return True


def _made(heuristic: Heuristic, ctx: InputContext) -> torch.Tensor:
    """`heuristic.make`'s values in the declared dtype (fp8: clamped to the finite range first)."""
    values = heuristic.make(ctx)
    dtype = dtypes.torch_dtype(ctx.dtype_name)
    if values.is_floating_point() and dtype.is_floating_point and ctx.dtype_name.startswith("float8"):
        limit = torch.finfo(dtype).max
        values = values.clamp(-limit, limit)
    return values.to(dtype).contiguous()


def random_input(name: str, spec: TensorSpec, shape: tuple[int, ...] | None, device: torch.device,
                 op_type: str | None, seed: int, profile: str = profiles.STANDARD):
    """A `random` input's value: a number for `shape: null`, else a new tensor."""
    if shape is None:
        return random_scalar(spec.dtype, make_generator(derive_seed(seed, "input", name), device))
    ctx = input_context(name, spec, shape, device, op_type, seed)
    value = generate(ctx)
    if value is not None:
        return value
    if profile == profiles.STRUCTURED and device.type != "meta" and profiles.applies(spec.dtype, shape):
        return profiles.structured_tensor(shape, spec.dtype, ctx.generator, device)
    return random_tensor(shape, spec.dtype, ctx.generator, device)


def random_input_into(out: torch.Tensor, name: str, spec: TensorSpec, device: torch.device, op_type: str | None,
                      seed: int, profile: str) -> None:
    """`random_input`'s values, written into `out`: drawn in place where the draw allows it (a contiguous
    tensor, so element i gets the i-th value as in a new one), else drawn and copied."""
    if not out.is_contiguous() or profile != profiles.STANDARD:
        out.copy_(random_input(name, spec, tuple(out.shape), device, op_type, seed, profile))
        return
    ctx = input_context(name, spec, tuple(out.shape), device, op_type, seed)
    if not generate_into(ctx, out):
        fill_random(out, spec.dtype, ctx.generator)


def input_context(name: str, spec: TensorSpec, shape: tuple[int, ...], device: torch.device,
                  op_type: str | None, seed: int) -> InputContext:
    """What a heuristic sees of one input, with the input's private generator and the shared ones."""

    def shared(key: str) -> torch.Generator:
        return make_generator(derive_seed(seed, "shared", key), device)

    return InputContext(name=name, dtype_name=spec.dtype, shape=shape, device=device,
                        generator=make_generator(derive_seed(seed, "input", name), device),
                        shared_generator=shared, description=spec.description or "", op_type=op_type)
