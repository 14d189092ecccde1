"""A block's calls past the model's largest workload sizes: the trace sizes that tell whether its export
depends on the size it was traced at (`blocks._draft`), and a cheap count that tells it first.

Far calls are scaled from the block's own capture calls where every size that varies follows the model's
axes (`scaled_call`); else every module's calls are recorded past the largest sizes, once per model: the
whole model's forward on fake tensors, loops over a size unrolled on the way (Qwen3-Next's gated delta
rule: 45 s), so scaling covers flattened token counts too (batch x sequence).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import torch
from torch.utils import _pytree as pytree

from solbench.extract import capture, generic
from solbench.extract.built import BuiltModel


class LargeCalls:
    """Each block's calls past the model's largest workload sizes (just past, then twice as far): the trace
    sizes that tell whether an export depends on its size. Scaled from the block's own capture calls where
    every size that varies follows a model axis (`scaled_call`); else every module's, recorded on
    fake tensors once, when first asked."""

    def __init__(self, built: BuiltModel, dtype: torch.dtype, points: list[dict[str, int]]):
        self.built, self.dtype, self.points = built, dtype, points
        self.recorded: list[dict[str, capture.Call]] | None = None
        self.refused = ""
        real = built.workload_axes
        top = {axis: max(real.get(axis) or sizes) for axis, sizes in built.capture_axes.items()}
        self.far = [{axis: far * size + 1 for axis, size in top.items()}  # +1: no power of two divides it
                    for far in (1, 2)]  # and a loop over chunks runs another count

    def refuse(self, why: str) -> None:
        """Never record: the model's forward past its largest sizes would unroll a loop over thousands of
        steps on fake tensors (Jamba's selective scan: minutes for every block that asks)."""
        if self.recorded is None:
            self.refused = why

    def calls(self, block: generic.Block) -> list[capture.Call]:
        scaled = [scaled_call(block.calls, self.points, point) for point in self.far]
        if all(call is not None for call in scaled):
            return scaled
        if self.refused:
            return []
        self.record()
        return [call for call in map(block.call_in, self.recorded or []) if call is not None]

    def record(self) -> None:
        """Record every module's far calls, once, unless refused: `calls` does it when first asked, and a model's
        blocks spread over workers (`block_pool`) before the workers fork, so that each has them."""
        if self.recorded is not None or self.refused:
            return
        self.recorded = []
        for point in self.far:
            try:
                self.recorded.append(capture.record_calls(self.built, point, self.dtype))
            except Exception:  # noqa: BLE001 - the model refuses that size: it is not a trace size
                continue

    def own_scale(self, block: generic.Block) -> bool:
        """Whether the block's far calls scale from its own calls: it never reads the recording."""
        return all(scaled_call(block.calls, self.points, point) is not None for point in self.far)


def may_refuse(block: generic.Block) -> bool:
    """Whether the block may refuse the far recording (`blocks._grows_with_size`): its sizes vary and its first
    two calls did not make as many tensors. A block that cannot is never a loop over a size."""
    if len(block.calls) < 2 or capture.varying_dims(block.calls[:2]) is None:
        return False
    first, second = block.calls[0].ops, block.calls[1].ops
    return first is None or first != second


def scaled_call(calls: list[capture.Call], points: list[dict[str, int]], far: dict[str, int]) -> capture.Call | None:
    """A block's call at the model sizes `far`, made from its calls at the capture sizes `points` without
    running the model: each input size that varies is a line through a model axis (`generic.related_axis`),
    continued to `far`; None where one does not fit. Recording the whole model past its largest sizes would
    unroll every loop over a size on the way (Jamba's selective scan: 4,097 steps in each of 63 layers)."""
    flat = [pytree.tree_flatten((c.args, c.kwargs)) for c in calls]
    if len(flat) < 3 or any(spec != flat[0][1] for _, spec in flat[1:]):
        return None
    leaves = []
    for index, leaf in enumerate(flat[0][0]):
        if not isinstance(leaf, torch.Tensor):
            leaves.append(leaf)
            continue
        shape = []
        for dim, size in enumerate(leaf.shape):
            values = [int(f[0][index].shape[dim]) for f in flat]
            if len(set(values)) == 1:
                shape.append(int(size))
                continue
            relation = generic.related_axis(values, points)
            if relation is not None:
                axis, ratio, offset = relation
                value = ratio * far[axis] + offset
            else:
                value = _product_value(values, points, far)
            if value is None:
                return None
            if value.denominator != 1 or value <= 0:
                return None
            shape.append(int(value))
        leaves.append(_strided_like(leaf, shape))
    args, kwargs = pytree.tree_unflatten(leaves, flat[0][1])
    return capture.Call(args, kwargs)


def _strided_like(leaf: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """A meta tensor of `shape` laid out as `leaf` is (same order of strides; broadcast dims stay stride 0)."""
    strides = [0] * len(shape)
    step = 1
    for dim in sorted(range(len(shape)), key=lambda d: (leaf.stride(d), -d)):
        if leaf.stride(dim) == 0 and leaf.shape[dim] != 1:
            continue
        strides[dim] = step
        step *= shape[dim]
    return torch.empty_strided(tuple(shape), tuple(strides), dtype=leaf.dtype, device="meta")


def _product_value(values: list[int], points: list[dict[str, int]], far: dict[str, int]) -> Fraction | None:
    """A size that is a plain multiple of the product of two or more model axes at every capture point (an
    MoE's or MLP's flattened tokens: batch x sequence), continued to `far`; None where no product fits."""
    axes = sorted(points[0])
    for count in range(2, len(axes) + 1):
        for chosen in itertools.combinations(axes, count):
            products = [math.prod(p[a] for a in chosen) for p in points[: len(values)]]
            ratio = Fraction(values[0], products[0])
            if all(Fraction(v, m) == ratio for v, m in zip(values, products)):
                return ratio * math.prod(far[a] for a in chosen)
    return None


def grows_past(block: generic.Block, far_calls: list[capture.Call]) -> bool:
    """Whether the block's code makes another number of tensors at its first far call than at its traced
    call, and again at the second far call than at the first: a loop over a size, which any trace unrolls
    (Qwen3-Next's gated delta rule: 187, 1,723 and 3,259 graph nodes). Its far exports could only show that
    the code depends on the size, and they are a model's costliest (78 s there); counted on fake tensors it
    costs a tenth. Equal counts say nothing: the exports decide."""
    traced = block.calls[0].ops
    if traced is None or len(far_calls) < 2:
        return False
    first = capture.ops_made(block.module, far_calls[0])
    if first is None or first == traced:
        return False
    second = capture.ops_made(block.module, far_calls[1])
    return second is not None and second != first
