"""Validation copies: a float32 copy's weights drawn in place are the values the recipe gives drawn apart,
and the bfloat16 copy casts those same draws."""

from __future__ import annotations

import torch
from torch import nn

from solbench.extract.copies import cpu_copy, realistic


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.bn = nn.BatchNorm1d(32)
        self.register_buffer("steps", torch.arange(4))


def test_drawn_in_place_equals_drawn_apart_and_the_bf16_copy_casts_them():
    meta = Block().to(torch.bfloat16).to("meta")
    fp32 = cpu_copy(meta, torch.float32)
    gen = torch.Generator().manual_seed(0)
    for name, tensor in [*fp32.named_parameters(), *fp32.named_buffers()]:
        apart = realistic(name, tuple(tensor.shape), tensor.dtype, gen)
        assert tensor.dtype == apart.dtype and torch.equal(tensor, apart), name
    assert fp32.norm.weight.dtype == torch.float32 and (fp32.bn.running_var > 0).all()
    assert 0.5 < float(fp32.proj.weight.std() * 16 ** 0.5) < 2.0  # ~ N(0, 1/fan_in)
    bf16 = cpu_copy(meta, torch.bfloat16)
    assert bf16.proj.weight.dtype == torch.bfloat16
    assert torch.equal(bf16.proj.weight, fp32.proj.weight.to(torch.bfloat16))
