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


def test_a_diffusers_block_is_copied_without_its_float32_warning(capfd):
    """diffusers' `ModelMixin.to` warns that modules "should be kept in float32" on every cast; the copy is
    made float32 on meta with nn.Module's own `to`, and a whole `--all` run printed that line per block."""
    import pytest

    diffusers = pytest.importorskip("diffusers")
    with torch.device("meta"):
        block = diffusers.models.Transformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=16,
                                                    norm_num_groups=4, cross_attention_dim=16)
    block = block.to(torch.bfloat16)  # as a model loads in bf16 (this cast warns too)
    capfd.readouterr()
    copied = cpu_copy(block, torch.float32)
    assert {p.dtype for p in copied.parameters()} == {torch.float32}
    assert "should be kept in float32" not in capfd.readouterr().err


def test_a_large_tensor_repeats_seeded_draws_with_no_two_rows_or_tensors_alike():
    """Past `TILE_FROM` elements the values come from a pool of a prime period, at an offset drawn per tensor:
    in place or apart the same, seeded, N(0, 1), and no two rows of a tensor, nor two tensors, equal."""
    from solbench.extract import copies

    shape = (1100, 1024)  # 1.13 M elements: past TILE_FROM
    assert shape[0] * shape[1] >= copies.TILE_FROM
    gen = torch.Generator().manual_seed(3)
    first, second = (copies.standard_normal(shape, gen) for _ in range(2))
    again = torch.empty(shape)
    copies.standard_normal(shape, torch.Generator().manual_seed(3), out=again)
    assert torch.equal(first, again)  # seeded, and in place the same as apart
    assert not torch.equal(first, second)
    assert torch.unique(first, dim=0).shape[0] == shape[0]  # every row its own
    assert abs(float(first.mean())) < 0.01 and abs(float(first.std()) - 1.0) < 0.01
    weight = realistic("proj.weight", shape, torch.float32, torch.Generator().manual_seed(3))
    assert torch.equal(weight, first * shape[1] ** -0.5)  # the recipe's scale on the same draws
