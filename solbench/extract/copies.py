"""Seeded CPU copies of a meta block for validation, at realistic scales: weights ~ N(0, 1/fan_in), norm
weights near 1, buffers the build followed (`known`) at their values. Both the generic and the backward
checks compare a module's copy with the reference fed the same tensors."""

from __future__ import annotations

import copy
import math
import os
import weakref

import torch
from torch import nn

from solbench.extract.known import known_buffers


def cpu_copy(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A CPU copy of a meta module, parameters and buffers filled at realistic scales (seeded); buffers
    whose values the build followed (`known`) hold those values.

    Validation asks for a float32 copy, then a bfloat16 one. The values are drawn once, in float32, and
    the second copy casts them: drawing them again cost as much as the comparison for large blocks (a
    Jamba MoE layer), and gives the same bits, since both copies cast the same float32 draws."""
    global _LAST_DRAWN
    block = copy.deepcopy(module)
    if dtype == torch.float32:  # else keep the dtypes the model was built with (float32 buffers stay so)
        # on meta, before any memory exists: nothing to convert. nn.Module's own `to`: diffusers' override
        # warns that some modules "should be kept in float32" (all of them are, here), once per block
        nn.Module.to(block, dtype)
    block = block._apply(_ARENA.placer(block, dtype)).eval()  # `to_empty`, into reused memory
    drawn = _LAST_DRAWN[1] if _LAST_DRAWN is not None and _LAST_DRAWN[0]() is module else None
    _LAST_DRAWN = None
    gen = torch.Generator().manual_seed(0)
    values = {}
    with torch.no_grad():
        for name, tensor in [*block.named_parameters(), *block.named_buffers()]:
            if drawn is not None and name in drawn:
                tensor.copy_(drawn[name])
                continue
            if tensor.dtype == torch.float32 and tensor.is_contiguous():  # drawn in place: no copy
                values[name] = realistic(name, tuple(tensor.shape), tensor.dtype, gen, out=tensor.detach())
                continue
            value = realistic(name, tuple(tensor.shape), tensor.dtype, gen)
            tensor.copy_(value)
            values[name] = tensor if tensor.dtype in (torch.float32, value.dtype) else value
        for name, value in known_buffers(block).items():  # computed from the config: never drawn
            block.get_buffer(name).copy_(value)
    if drawn is None and dtype == torch.float32:
        _LAST_DRAWN = (weakref.ref(module), values)
    return block


_LAST_DRAWN: tuple | None = None  # (the module, its float32 draws): the next copy of it casts them


class WeightArena:
    """Memory for validation copies' parameters, kept from one copy to the next.

    `to_empty` gave every copy fresh memory: glibc maps each tensor over 32 MiB anew, and the kernel zeroes
    every page at its first touch (a minor fault). Copies were 84% of FLUX.2-dev's page faults (5.2 of 6.3
    M, 21.8 GB of weights over 136 copies) and most of its system time. Here each requested dtype (one
    slot each: a float32 copy's draws are read while its bfloat16 copy is filled) places its parameters in
    one buffer, reused by the next copy of that dtype once the earlier one is done with. Every tensor placed
    is then written by `cpu_copy` before use, as after `to_empty`. Buffers keep memory of their own: a
    `deepcopy` of a plain tensor copies its whole storage (the float64 check copies a module), where a
    parameter's clones its own elements. A forked process starts with no buffers (writing the parent's
    would copy every page) and `release` hands them back between models."""

    ALIGN_BYTES = 4096

    def __init__(self):
        self.slots: dict[torch.dtype, torch.Tensor] = {}
        self.pid = os.getpid()

    def placer(self, block: nn.Module, slot: torch.dtype):
        """A function for `Module._apply` that gives each contiguous meta parameter of `block` CPU memory in
        `slot`'s buffer, and any other tensor its own, as `to_empty` does."""
        params = [t for m in block.modules() for t in m._parameters.values() if t is not None]
        region = self._region(slot, sum(self._span(t) for t in params))
        offset = 0

        def place(tensor: torch.Tensor) -> torch.Tensor:
            nonlocal offset
            span = self._span(tensor)
            if not isinstance(tensor, nn.Parameter) or not tensor.is_contiguous() or offset + span > region.numel():
                return torch.empty_like(tensor, device="cpu")
            placed = region[offset:offset + tensor.nbytes].view(tensor.dtype).view(tensor.shape)
            offset += span
            return placed

        return place

    def release(self) -> None:
        self.slots.clear()

    def _span(self, tensor: torch.Tensor) -> int:
        return -(-max(tensor.nbytes, 1) // self.ALIGN_BYTES) * self.ALIGN_BYTES

    def _region(self, slot: torch.dtype, nbytes: int) -> torch.Tensor:
        if os.getpid() != self.pid:
            self.slots, self.pid = {}, os.getpid()
        held = self.slots.get(slot)
        if held is None or held.numel() < nbytes:
            grown = max(nbytes, 2 * held.numel()) if held is not None else nbytes
            self.slots.pop(slot, None)  # handed back before the larger one is taken
            try:  # twice the size: pages never touched cost nothing, and a model's next larger block fits
                held = torch.empty(grown, dtype=torch.uint8)
            except RuntimeError:  # the address space refused it (strict overcommit)
                held = torch.empty(nbytes, dtype=torch.uint8)
            self.slots[slot] = held
        return held


_ARENA = WeightArena()


def release_weights() -> None:
    """Hand the kept copy memory back (between models: the next model's blocks have other sizes)."""
    _ARENA.release()


def realistic(name: str, shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """Norm weights and running variances near 1, biases and vectors small, matrices ~ N(0, 1/fan_in);
    integers small. (A running variance drawn like a bias was negative half the time: a batch norm's output
    was NaN, and NaN never equals NaN, so every batch norm failed validation.) With `out` (float32), drawn
    and scaled in place: the same values, without a second copy of a large block's weights."""
    if not dtype.is_floating_point:
        return torch.randint(0, 2, shape, generator=gen).to(dtype) if dtype == torch.bool else \
            torch.randint(0, max(shape[-1], 1) if shape else 2, shape, generator=gen).to(dtype)
    base = standard_normal(shape, gen, out)
    leaf = name.rsplit(".", 1)[-1]
    if ("norm" in name.lower() and leaf == "weight") or leaf == "running_var":  # a batch norm's variance: > 0
        base.mul_(0.1).add_(1.0)
    elif len(shape) <= 1 or leaf.endswith("bias"):
        base.mul_(0.1)
    else:
        fan_in = 1
        for size in shape[1:]:
            fan_in *= size
        base.mul_(fan_in ** -0.5)
    return base if out is not None else base.to(dtype)


TILE_FROM = 1 << 20  # elements: a tensor this large takes its values from the pool
POOL_SIZE = 1_000_003  # a prime: no row length lines two rows of a weight up on the pool's period
_POOL: torch.Tensor | None = None


def standard_normal(shape: tuple[int, ...], gen: torch.Generator, out: torch.Tensor | None = None) -> torch.Tensor:
    """N(0, 1) values of `shape` (into `out`). A large tensor repeats one million seeded draws from an offset
    `gen` draws: drawing every value (4.5 ns an element on a 2-core VM) was most of the time it took to copy a
    large block for validation (FLUX.2-dev: 30 of its 73 s), copying costs a tenth of that. Validation
    compares a module with its reference on the same weights, bit for bit, so what it needs of them is that
    no two rows or tensors are alike: the period is a prime larger than any row, so no two of a tensor's
    first million rows start at the same place in it, and every tensor starts at an offset of its own."""
    count = math.prod(shape)
    if count < TILE_FROM:
        return torch.randn(shape, generator=gen, out=out) if out is not None else torch.randn(shape, generator=gen)
    global _POOL
    if _POOL is None:
        draws = torch.randn(POOL_SIZE, generator=torch.Generator().manual_seed(POOL_SIZE))
        _POOL = torch.cat([draws, draws])  # any window of POOL_SIZE values is one contiguous slice
    offset = int(torch.randint(0, POOL_SIZE, (), generator=gen))
    window = _POOL[offset:offset + POOL_SIZE]
    base = out if out is not None else torch.empty(shape)
    flat = base.view(-1)
    for start in range(0, count, POOL_SIZE):
        end = min(start + POOL_SIZE, count)
        flat[start:end].copy_(window[: end - start])
    return base
