"""Validation copies: a float32 copy's weights drawn in place are the values the recipe gives drawn apart,
and the bfloat16 copy casts those same draws."""

from __future__ import annotations

import copy

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


class Other(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 16, bias=False)
        self.register_buffer("scale", torch.ones(16))


def _values(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.clone() for name, t in [*module.named_parameters(), *module.named_buffers()]}


def test_copies_reuse_one_buffer_per_dtype_and_hold_what_a_fresh_copy_holds():
    """A copy's tensors are placed in memory kept from the previous copy of its dtype (the kernel zeroed
    every fresh page of every copy before): a block copied after another holds exactly what it holds when
    copied first, and the float32 draws the bfloat16 copy casts are not overwritten by that copy."""
    from solbench.extract import copies

    block, other = (m.to(torch.bfloat16).to("meta") for m in (Block(), Other()))  # as models load, in bf16
    copies.release_weights()
    first = _values(cpu_copy(other, torch.float32))
    first_bf16 = _values(cpu_copy(other, torch.bfloat16))
    copies.release_weights()
    a32 = cpu_copy(block, torch.float32)
    a16 = cpu_copy(block, torch.bfloat16)
    assert torch.equal(a16.proj.weight, a32.proj.weight.to(torch.bfloat16))  # cast from intact float32 draws
    b32 = cpu_copy(other, torch.float32)  # into a32's memory: a32 is done with
    assert b32.up.weight.untyped_storage().data_ptr() == a32.proj.weight.untyped_storage().data_ptr()
    for name, value in _values(b32).items():
        assert torch.equal(value, first[name]), name
    b16 = cpu_copy(other, torch.bfloat16)
    for name, value in _values(b16).items():
        assert value.dtype == first_bf16[name].dtype and torch.equal(value, first_bf16[name]), name
    assert b16.up.weight.untyped_storage().data_ptr() != b32.up.weight.untyped_storage().data_ptr()
    copies.release_weights()
    assert cpu_copy(other, torch.float32).up.weight.untyped_storage().data_ptr() != \
        b32.up.weight.untyped_storage().data_ptr()  # released: b32 still holds its own memory
    copied = copy.deepcopy(b32)  # as the float64 check copies a module: no more than the block's own
    assert copied.scale.untyped_storage().nbytes() == b32.scale.nbytes
    assert copied.up.weight.untyped_storage().nbytes() == b32.up.weight.nbytes


def test_a_forked_process_copies_into_memory_of_its_own():
    """Writing into memory the parent placed copies in would copy every page in the child: a forked process
    starts with no kept buffers."""
    import os

    from solbench.extract import copies

    meta = Other().to("meta")
    parent = cpu_copy(meta, torch.float32)
    parent_ptr = parent.up.weight.untyped_storage().data_ptr()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report whether its copy landed in the parent's buffer, then leave at once
        try:
            torch.set_num_threads(1)  # no OpenMP region in a forked child (the parent's pool does not survive)
            child = cpu_copy(meta, torch.float32)
            same = child.up.weight.untyped_storage().data_ptr() == parent_ptr
            os.write(write, b"same" if same else b"own")
        finally:
            os._exit(0)
    os.close(write)
    import select

    if not select.select([read], [], [], 300)[0]:  # a loaded machine is slow, a hung child is a failure
        os.kill(pid, 9)
    answer = os.read(read, 16) if select.select([read], [], [], 0)[0] else b"no answer"
    os.waitpid(pid, 0)
    assert answer == b"own"
    assert copies._ARENA.slots[torch.float32].data_ptr() == parent_ptr  # the parent's buffer is still its own


def test_the_template_validation_draws_its_large_weights_from_the_same_pool():
    """The reduced decoder the templates are validated on fills a large float32 weight from the seeded pool
    (drawing each of a vocabulary table's values took most of a small model's weight setup), at its scale."""
    from solbench.extract import copies
    from solbench.extract.validate import _init_

    shape = (1024, 1100)  # past TILE_FROM
    weight = torch.empty(shape)
    _init_("model.layers.0.mlp.up_proj.weight", weight, torch.Generator().manual_seed(5))
    pooled = copies.standard_normal(shape, torch.Generator().manual_seed(5))
    assert torch.equal(weight, pooled * shape[1] ** -0.5)
    table = torch.empty(shape)
    _init_("model.embed_tokens.weight", table, torch.Generator().manual_seed(5))
    assert torch.equal(table, pooled)  # an embedding keeps N(0, 1)
