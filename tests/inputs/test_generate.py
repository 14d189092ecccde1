import math
import subprocess
import sys

import pytest
import torch

from solbench.inputs import allocate_outputs, fill_value, make_inputs, needs_second_fill
from solbench.inputs.errors import InputError
from solbench.spec import dtypes
from tests.inputs.inputs_builders import build_definition, build_workload

AXES = {"n": {"type": "var"}, "h": {"type": "const", "value": 8}}


def simple_definition():
    return build_definition({
        "x": {"shape": ["n", "h"], "dtype": "bfloat16"},
        "norm_weight": {"shape": ["h"], "dtype": "float32"},
        "ids": {"shape": ["n"], "dtype": "int64"},
        "eps": {"shape": None, "dtype": "float32"},
        "k": {"shape": None, "dtype": "int32"},
    }, {"y": {"shape": ["n", "h"], "dtype": "bfloat16"}}, AXES)


def inputs(seed=1, workload=None, device="cpu", **kw):
    d = simple_definition()
    w = workload or build_workload({"eps": {"type": "scalar", "value": 1e-6}}, {"n": 4})
    return make_inputs(d, w, d.resolve_axes(w.axes), seed=seed, device=device, **kw)


def test_values_in_definition_order_with_declared_shapes_and_dtypes():
    x, weight, ids, eps, k = inputs()
    assert x.shape == (4, 8) and x.dtype == torch.bfloat16
    assert weight.shape == (8,) and weight.dtype == torch.float32
    assert ids.shape == (4,) and ids.dtype == torch.int64 and (ids >= 0).all()  # index heuristic
    assert eps == 1e-6 and type(eps) is float
    assert type(k) is int  # random scalar for an input the workload does not mention


def test_same_seed_same_inputs_other_seed_other_inputs():
    a, b, c = inputs(1), inputs(1), inputs(2)
    assert all(torch.equal(p, q) if isinstance(p, torch.Tensor) else p == q for p, q in zip(a, b))
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])


def test_inputs_do_not_share_a_stream():
    d = build_definition({"a": {"shape": ["n"], "dtype": "float32"}, "b": {"shape": ["n"], "dtype": "float32"}},
                         axes={"n": {"type": "var"}})
    w = build_workload(axes={"n": 64})
    a, b = make_inputs(d, w, {"n": 64}, seed=3, device="cpu")
    assert not torch.equal(a, b)


def test_global_rng_reseeding_does_not_change_inputs():
    torch.manual_seed(0)
    a = inputs(5)
    torch.manual_seed(999)
    torch.rand(100)
    b = inputs(5)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_generation_does_not_touch_global_rng():
    torch.manual_seed(0)
    inputs(5)
    after = torch.randn(3)
    torch.manual_seed(0)
    assert torch.equal(after, torch.randn(3))


def test_norm_weight_heuristic_applies_through_make_inputs():
    weight = inputs()[1]
    assert not torch.all(weight == 1)


def test_scalar_for_tensor_input_is_broadcast():
    w = build_workload({"x": {"type": "scalar", "value": 2}, "eps": {"type": "scalar", "value": 1}}, {"n": 3})
    x, *_, eps, _ = inputs(workload=w)
    assert x.shape == (3, 8) and x.dtype == torch.bfloat16 and (x == 2).all()
    assert eps == 1.0 and type(eps) is float


def test_scalar_conversion_rules():
    w = build_workload({"k": {"type": "scalar", "value": 2.0}}, {"n": 3})
    assert inputs(workload=w)[4] == 2 and type(inputs(workload=w)[4]) is int
    w = build_workload({"k": {"type": "scalar", "value": 2.5}}, {"n": 3})
    with pytest.raises(InputError) as info:
        inputs(workload=w)
    assert "'k'" in str(info.value) and "2.5" in str(info.value)


def test_python_number_rejects_what_does_not_fit():
    from solbench.inputs.generate import python_number

    assert python_number("b", 1, "bool") is True
    for value, dtype in ((2, "bool"), (float("inf"), "int32"), (float("nan"), "int64"), ("1", "float32"),
                         (torch.zeros(2), "float32")):
        with pytest.raises(InputError):
            python_number("v", value, dtype)
    assert python_number("f", torch.tensor(1.5, dtype=torch.float8_e4m3fn), "float32") == 1.5


def test_zero_d_tensor_scalar():
    d = build_definition({"s": {"shape": [], "dtype": "float32"}})
    (s,) = make_inputs(d, build_workload({"s": {"type": "scalar", "value": 3}}), {}, seed=1, device="cpu")
    assert s.shape == () and s.item() == 3.0


def test_missing_axis_value_is_an_input_error():
    d = simple_definition()
    with pytest.raises(InputError):
        make_inputs(d, build_workload(axes={"n": 2}), {"n": 2}, seed=1, device="cpu")  # h not resolved


def test_meta_device_shapes_only():
    d = build_definition({"x": {"shape": ["n", "n"], "dtype": "bfloat16"}}, axes={"n": {"type": "var"}})
    (x,) = make_inputs(d, build_workload(axes={"n": 1 << 20}), {"n": 1 << 20}, seed=1, device="meta")
    assert x.device.type == "meta" and x.shape == (1 << 20, 1 << 20)


_CHILD = """
import hashlib, sys, torch
sys.path.insert(0, {tests!r})
from tests.inputs.inputs_builders import build_definition, build_workload
from solbench.inputs import make_inputs
d = build_definition({{"x": {{"shape": ["n"], "dtype": "bfloat16"}}, "cos": {{"shape": ["n"], "dtype": "float32"}},
                      "w": {{"shape": ["n", "n"], "dtype": "float16"}}}}, axes={{"n": {{"type": "var"}}}})
torch.manual_seed(int(sys.argv[1]))  # the process's global RNG must not matter
values = make_inputs(d, build_workload(axes={{"n": 64}}), {{"n": 64}}, seed=77, device="cpu")
h = hashlib.sha256()
for v in values:
    h.update(v.view(torch.uint8).numpy().tobytes())
print(h.hexdigest())
"""


def test_two_processes_regenerate_identical_inputs():
    import pathlib

    code = _CHILD.format(tests=str(pathlib.Path(__file__).resolve().parents[1]))
    root = str(pathlib.Path(__file__).resolve().parents[2])
    outs = [subprocess.run([sys.executable, "-c", code, str(s)], capture_output=True, text=True, check=True,
                           cwd=root).stdout for s in (1, 2)]
    assert outs[0] == outs[1] and len(outs[0].strip()) == 64


# -- allocate_outputs -------------------------------------------------------------------------

ALL_OUTPUTS = {f"o_{n}": {"shape": ["n", 4], "dtype": n} for n in dtypes.DTYPE_NAMES}


def out_definition():
    return build_definition({"x": {"shape": ["n"], "dtype": "float32"}}, ALL_OUTPUTS, {"n": {"type": "var"}})


def test_nan_fill_poisons_floats_and_uses_sentinels_elsewhere():
    outs = dict(zip(ALL_OUTPUTS, allocate_outputs(out_definition(), {"n": 3}, "cpu")))
    for name, t in outs.items():
        dtype_name = name[2:]
        assert t.shape == (3, 4) and t.dtype == dtypes.torch_dtype(dtype_name)
        if dtype_name == "float4_e2m1fn_x2":
            assert (t.view(torch.uint8) == 0x77).all()
        elif dtypes.is_floating(dtype_name):
            assert torch.isnan(t.float()).all()
    assert (outs["o_int32"] == torch.iinfo(torch.int32).min).all()
    assert (outs["o_int64"] == torch.iinfo(torch.int64).min).all()
    assert (outs["o_uint8"] == 255).all()
    assert outs["o_bool"].all()


def test_alt_fill_differs_for_every_non_float_dtype():
    d = out_definition()
    primary, alt = allocate_outputs(d, {"n": 2}, "cpu", "nan"), allocate_outputs(d, {"n": 2}, "cpu", "alt")
    for name, p, a in zip(ALL_OUTPUTS, primary, alt):
        if dtypes.is_floating(name[2:]) and name != "o_float4_e2m1fn_x2":
            assert torch.isnan(a.float()).all()
        else:
            assert not torch.equal(p.view(torch.uint8), a.view(torch.uint8)), name


def test_zeros_and_empty_fills():
    d = out_definition()
    zeros = allocate_outputs(d, {"n": 2}, "cpu", "zeros")
    assert all((z.view(torch.uint8) == 0).all() for z in zeros)
    assert [e.shape for e in allocate_outputs(d, {"n": 2}, "cpu", "empty")] == [z.shape for z in zeros]
    with pytest.raises(ValueError):
        fill_value("float32", "ones")


def test_scalar_output_cannot_be_destination_passed():
    d = build_definition({"x": {"shape": ["n"], "dtype": "float32"}}, {"loss": {"shape": None, "dtype": "float32"}},
                         {"n": {"type": "var"}})
    with pytest.raises(InputError):
        allocate_outputs(d, {"n": 2}, "cpu")


def test_needs_second_fill():
    floats = build_definition({"x": {"shape": ["n"], "dtype": "float32"}}, {"y": {"shape": ["n"], "dtype": "bfloat16"}},
                              {"n": {"type": "var"}})
    assert not needs_second_fill(floats)
    assert needs_second_fill(out_definition())


def test_fill_values_are_what_the_doc_says():
    assert math.isnan(fill_value("bfloat16", "nan"))
    assert fill_value("int8", "nan") == -128 and fill_value("int8", "alt") == 127
    assert fill_value("bool", "nan") is True and fill_value("bool", "alt") is False
    assert fill_value("float32", "empty") is None
