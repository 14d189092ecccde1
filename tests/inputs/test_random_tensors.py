import pytest
import torch

from solbench.inputs.fp4 import FP4_DTYPE, unpack_codes
from solbench.inputs.random_tensors import INT_BOUNDS, random_scalar, random_tensor
from solbench.inputs.seeds import make_generator
from solbench.spec import dtypes


def gen(seed=0):
    return make_generator(seed, "cpu")


@pytest.mark.parametrize("name", dtypes.DTYPE_NAMES)
def test_every_dtype_has_shape_dtype_and_finite_values(name):
    t = random_tensor((64, 32), name, gen(), "cpu")
    assert t.shape == (64, 32)
    assert t.dtype == dtypes.torch_dtype(name)
    if name == "float4_e2m1fn_x2":
        return
    if dtypes.is_floating(name):
        assert torch.isfinite(t.float()).all()
        assert t.float().std() > 0.5  # normal-ish, not constant


@pytest.mark.parametrize("name", ["float64", "float32", "float16", "bfloat16"])
def test_floats_are_standard_normal(name):
    t = random_tensor((200_000,), name, gen(), "cpu").double()
    assert abs(t.mean().item()) < 0.02 and abs(t.std().item() - 1) < 0.02


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_never_nan_or_inf(name):
    t = random_tensor((100_000,), name, gen(), "cpu").float()
    assert torch.isfinite(t).all()
    assert (t < 0).any() and (t > 0).any()


def test_fp4_packed_shape_and_all_codes_used():
    t = random_tensor((16, 64), "float4_e2m1fn_x2", gen(), "cpu")
    assert t.dtype == FP4_DTYPE and t.shape == (16, 64)  # declared shape is the packed shape
    codes = unpack_codes(t)
    assert codes.shape == (16, 128)
    assert set(codes.unique().tolist()) == set(range(16))


@pytest.mark.parametrize("name", ["int8", "int16", "int32", "int64", "uint8", "bool"])
def test_integers_stay_in_bounds(name):
    t = random_tensor((100_000,), name, gen(), "cpu").long()
    low, high = INT_BOUNDS[name]
    assert t.min() >= low and t.max() < high
    span = max((high - low) // 8, 1)
    assert t.min() < low + span and t.max() >= high - span  # the range is used


def test_same_generator_seed_same_tensor_different_seed_different():
    a = random_tensor((1000,), "bfloat16", gen(5), "cpu")
    b = random_tensor((1000,), "bfloat16", gen(5), "cpu")
    c = random_tensor((1000,), "bfloat16", gen(6), "cpu")
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_global_rng_reseeding_does_not_matter():
    torch.manual_seed(0)
    a = random_tensor((1000,), "float32", gen(5), "cpu")
    torch.manual_seed(1)
    torch.randn(10)
    b = random_tensor((1000,), "float32", gen(5), "cpu")
    assert torch.equal(a, b)


def test_meta_device_gives_shape_only():
    t = random_tensor((1 << 20, 1 << 20), "bfloat16", gen(), "meta")
    assert t.device.type == "meta" and t.shape == (1 << 20, 1 << 20)


@pytest.mark.parametrize("name,kind", [("float32", float), ("bfloat16", float), ("int32", int), ("bool", bool),
                                       ("float8_e4m3fn", float), ("float4_e2m1fn_x2", float)])
def test_random_scalar_is_a_python_number(name, kind):
    value = random_scalar(name, gen())
    assert type(value) is kind
