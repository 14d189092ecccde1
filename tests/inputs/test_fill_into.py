"""Fresh inputs drawn straight into a timed call's argument slot: the same bits the judge rebuilds."""

import math

import pytest
import torch

from solbench.inputs import make_inputs
from solbench.inputs.errors import InputError
from solbench.inputs.generate import fillable
from tests.inputs.inputs_builders import build_definition, build_workload

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]

INPUTS = {
    "hidden_states": {"shape": ["m", "k"], "dtype": "bfloat16"},     # plain random
    "gate_proj_weight": {"shape": ["n", "k"], "dtype": "bfloat16"},  # weight_matrix, drawn in place
    "fp8_weight": {"shape": ["n", "k"], "dtype": "float8_e4m3fn"},   # weight_matrix, drawn in float32 and copied
    "token_ids": {"shape": ["m"], "dtype": "int64"},                  # index_like (no fill): drawn and copied
    "attn_mask": {"shape": ["m", "m"], "dtype": "bool"},              # bool_mask
    "norm_weight": {"shape": ["k"], "dtype": "float32"},              # norm_weight
    "bias": {"shape": ["k"], "dtype": "float16"},                     # scalar source, broadcast
    "eps": {"shape": None, "dtype": "float32"},                       # scalar Python number
}
AXES = {"m": 48, "n": 40, "k": 64}


def problem():
    definition = build_definition(INPUTS, {"y": {"shape": ["m", "k"], "dtype": "bfloat16"}},
                                  {"m": {"type": "var"}, "n": {"type": "var"}, "k": {"type": "var"}})
    workload = build_workload({"bias": {"type": "scalar", "value": 0.5}, "eps": {"type": "scalar", "value": 1e-6}},
                              AXES)
    return definition, workload


def raw(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.element_size() == 1 else t


@pytest.mark.parametrize("device", DEVICES)
def test_drawn_into_slots_equals_a_new_set(device):
    definition, workload = problem()
    assert fillable(definition, workload)
    expected = make_inputs(definition, workload, AXES, seed=11, device=device)
    slots = [torch.empty_like(v) if isinstance(v, torch.Tensor) else v for v in expected]
    pointers = [s.data_ptr() for s in slots if isinstance(s, torch.Tensor)]
    got = make_inputs(definition, workload, AXES, seed=11, device=device, out=slots)
    assert [g.data_ptr() for g in got if isinstance(g, torch.Tensor)] == pointers  # written in place
    for name, a, b in zip(INPUTS, expected, got):
        if isinstance(a, torch.Tensor):
            assert torch.equal(raw(a), raw(b)), name
        else:
            assert a == b, name
    other = make_inputs(definition, workload, AXES, seed=12, device=device, out=slots)
    assert not torch.equal(raw(other[1]), raw(expected[1]))  # another seed, other values, same slot


@pytest.mark.parametrize("device", DEVICES)
def test_a_non_contiguous_slot_gets_the_same_values(device):
    definition, workload = problem()
    expected = make_inputs(definition, workload, AXES, seed=3, device=device)
    slots = [torch.empty(tuple(reversed(v.shape)), dtype=v.dtype, device=device).T if isinstance(v, torch.Tensor)
             and v.dim() == 2 else (torch.empty_like(v) if isinstance(v, torch.Tensor) else v) for v in expected]
    assert not slots[0].is_contiguous()
    got = make_inputs(definition, workload, AXES, seed=3, device=device, out=slots)
    for name, a, b in zip(INPUTS, expected, got):
        if isinstance(a, torch.Tensor):
            assert torch.equal(raw(a), raw(b.contiguous())), name


def test_weight_matrix_keeps_its_scale_when_drawn_in_place():
    definition, workload = problem()
    values = make_inputs(definition, workload, {"m": 8, "n": 512, "k": 1024}, seed=5, device="cpu")
    std = values[1].float().std().item()
    assert abs(std * math.sqrt(1024) - 1.0) < 0.02


def test_inputs_that_are_not_only_seeded_are_refused():
    definition, workload = problem()
    random_eps = build_workload({"bias": {"type": "scalar", "value": 0.5}}, AXES)  # eps: a random Python number
    assert not fillable(definition, random_eps)
    slots = make_inputs(definition, workload, AXES, seed=1, device="cpu")
    with pytest.raises(InputError, match="cannot be drawn into given tensors"):
        make_inputs(definition, random_eps, AXES, seed=1, device="cpu", out=slots)
    slots[0] = torch.empty(3, dtype=torch.bfloat16)
    with pytest.raises(InputError, match="hidden_states"):
        make_inputs(definition, workload, AXES, seed=1, device="cpu", out=slots)
