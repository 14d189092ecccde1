"""`far_match`: a block's traced export confirmed at a far size by a static export there, operation by
operation. It must confirm code that does not depend on the size, and refuse a literal, an operator or a
range that the far size changes (the dynamic far exports then decide, as `test_workload_shapes` shows for
Mamba2's baked chunk count)."""

from __future__ import annotations

import torch
from torch import nn
from torch.export import Dim

from solbench.extract import far_match


class Heads(nn.Module):
    """Sizes read from the input (a view into heads, a flattened batch) and two slices a static trace spells
    otherwise: `x[:, :]` (dropped there) and `x[:k]` (start None or 0)."""

    def __init__(self, scale: float = 2.0, extra: bool = False):
        super().__init__()
        self.proj, self.norm, self.scale, self.extra = nn.Linear(8, 16), nn.LayerNorm(16), scale, extra

    def forward(self, x):
        b, t, _ = x.shape
        x = x[:, :]
        y = self.norm(self.proj(x)).view(b, t, 4, 4).transpose(1, 2) * self.scale
        if self.extra:
            y = torch.tanh(y)
        return y.reshape(b * 4, t, 4)[: b * 2]


class Branch(nn.Module):
    """A branch on the length: traced at 6 tokens, the export holds only while the length stays <= 16 (its
    range constraint), though here both branches happen to do the same."""

    def forward(self, x):
        return x * 2 if x.shape[1] > 16 else x * 2


def _dynamic(module: nn.Module, shape: tuple[int, ...]):
    x = torch.empty(shape, device="meta")
    return torch.export.export(module.to("meta"), (x,), dynamic_shapes=({0: Dim.AUTO, 1: Dim.AUTO},), strict=False)


def _static(module: nn.Module, shape: tuple[int, ...]):
    x = torch.empty(shape, device="meta")
    return torch.export.export(module.to("meta"), (x,), strict=False), (x,)


def test_code_that_does_not_depend_on_the_size_is_confirmed_far_from_where_it_was_traced():
    traced = _dynamic(Heads(), (4, 6, 8))
    far, inputs = _static(Heads(), (9, 4097, 8))
    assert far_match.same_operations(traced, far, inputs)


def test_another_literal_or_another_operator_at_the_far_size_is_not_confirmed():
    traced = _dynamic(Heads(), (4, 6, 8))
    for other in (Heads(scale=3.0), Heads(extra=True)):
        far, inputs = _static(other, (9, 4097, 8))
        assert not far_match.same_operations(traced, far, inputs)


def test_a_far_size_outside_the_traced_range_is_not_confirmed():
    traced = _dynamic(Branch(), (4, 6, 8))
    assert "VR[2, 16]" in str(traced.range_constraints)
    far, inputs = _static(Branch(), (9, 4097, 8))
    assert not far_match.same_operations(traced, far, inputs)  # the same operations, but past the guard
    near, inputs = _static(Branch(), (9, 12, 8))  # inside the range: the same code
    assert far_match.same_operations(traced, near, inputs)


def test_inputs_of_another_shape_than_the_export_declares_are_not_confirmed():
    traced = _dynamic(Heads(), (4, 6, 8))
    far, inputs = _static(Heads(), (9, 4097, 8))
    assert not far_match.same_operations(traced, far, (torch.empty(9, 4097, 7, device="meta"),))
    assert not far_match.same_operations(traced, far, inputs + inputs)
