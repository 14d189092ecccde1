"""The same guarantees on a CUDA device: device generators, determinism, RNG isolation."""

import subprocess
import sys

import pytest
import torch

from solbench.check.correctness import compare
from solbench.check.outputs import structural_check
from solbench.inputs import allocate_outputs, make_inputs
from solbench.inputs.random_tensors import random_tensor
from solbench.inputs.seeds import make_generator
from solbench.spec import dtypes
from solbench.spec.trace import Status
from solbench.spec.workload import Tolerance
from tests.inputs.inputs_builders import build_definition, build_workload, entrypoint_from

pytestmark = pytest.mark.gpu

ENTRY = '''
def get_inputs(axes_and_scalars, device):
    g = torch.Generator(device=device)
    g.manual_seed(42)
    return {"x": torch.randn(axes_and_scalars["n"], device=device),
            "w": torch.randn(axes_and_scalars["n"], device=device, generator=g)}
'''


def definition():
    return build_definition({"x": {"shape": ["n"], "dtype": "float32"}, "w": {"shape": ["n"], "dtype": "float32"},
                             "q_proj_weight": {"shape": ["n", "n"], "dtype": "bfloat16"},
                             "mask": {"shape": ["n", "n"], "dtype": "bool"}},
                            {"y": {"shape": ["n"], "dtype": "float32"}, "i": {"shape": ["n"], "dtype": "int32"}},
                            {"n": {"type": "var"}}, entrypoint_source=ENTRY, entrypoint="get_inputs")


def gpu_inputs(seed):
    d = definition()
    w = build_workload({"x": {"type": "custom"}, "w": {"type": "custom"}}, {"n": 256})
    return make_inputs(d, w, {"n": 256}, seed=seed, device="cuda", custom_entrypoint=entrypoint_from(d))


def test_generator_lives_on_the_gpu():
    assert make_generator(1, "cuda").device.type == "cuda"


@pytest.mark.parametrize("name", dtypes.DTYPE_NAMES)
def test_random_tensors_on_gpu_are_deterministic(name):
    a = random_tensor((64, 32), name, make_generator(3, "cuda"), "cuda")
    b = random_tensor((64, 32), name, make_generator(3, "cuda"), "cuda")
    c = random_tensor((64, 32), name, make_generator(4, "cuda"), "cuda")
    assert a.device.type == "cuda" and a.dtype == dtypes.torch_dtype(name)
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    assert not torch.equal(a.view(torch.uint8), c.view(torch.uint8))


def test_make_inputs_on_gpu_deterministic_and_isolated():
    torch.cuda.manual_seed(0)
    cuda_state, cpu_state = torch.cuda.get_rng_state(), torch.get_rng_state()
    a = gpu_inputs(7)
    assert torch.equal(torch.cuda.get_rng_state(), cuda_state) and torch.equal(torch.get_rng_state(), cpu_state)
    torch.cuda.manual_seed(123)
    b, c = gpu_inputs(7), gpu_inputs(8)
    assert all(t.device.type == "cuda" for t in a)
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1]) and not torch.equal(a[2], c[2])


_CHILD = """
import hashlib, sys, torch
sys.path.insert(0, {tests!r})
from inputs import test_gpu
h = hashlib.sha256()
for v in test_gpu.gpu_inputs(5):
    h.update(v.cpu().view(torch.uint8).numpy().tobytes())
print(h.hexdigest())
"""


def test_two_gpu_processes_agree():
    import pathlib

    code = _CHILD.format(tests=str(pathlib.Path(__file__).resolve().parents[1]))
    root = str(pathlib.Path(__file__).resolve().parents[2])
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root).stdout
            for _ in range(2)]
    assert outs[0] == outs[1] and len(outs[0].strip()) == 64


def test_outputs_and_checks_on_gpu():
    d = definition()
    y, i = allocate_outputs(d, {"n": 256}, "cuda")
    assert torch.isnan(y).all() and (i == torch.iinfo(torch.int32).min).all()
    x = torch.randn(256, device="cuda")
    assert structural_check([x, i], d, {"n": 256}, inputs=[x])[0] == Status.REWARD_HACK
    assert structural_check([x.clone(), i], d, {"n": 256}, inputs=[x]) == (None, "")
    assert compare(x.clone(), x, Tolerance(), "float32").passed
    y[:128] = x[:128]
    assert not compare(y, x, Tolerance(required_matched_ratio=0.5), "float32").passed
