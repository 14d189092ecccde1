import random

import numpy
import pytest
import torch

from solbench.inputs import make_inputs
from solbench.inputs.custom import call_entrypoint
from solbench.inputs.errors import InputError
from tests.inputs.inputs_builders import build_definition, build_workload, entrypoint_from

GLOBAL_RNG_ENTRY = '''
def get_inputs(axes_and_scalars, device):
    n = axes_and_scalars["n"]
    return {"x": torch.randn(n, device=device), "scale": axes_and_scalars["scale"] * 2.0}
'''


def definition():
    return build_definition({"x": {"shape": ["n"], "dtype": "float32"}, "scale": {"shape": None, "dtype": "float32"}},
                            axes={"n": {"type": "var"}}, entrypoint_source=GLOBAL_RNG_ENTRY, entrypoint="get_inputs")


def workload():
    return build_workload({"x": {"type": "custom"}, "scale": {"type": "scalar", "value": 0.5}}, {"n": 16})


def run(seed, d=None, w=None, entry=None, **kw):
    d = d or definition()
    return make_inputs(d, w or workload(), d.resolve_axes((w or workload()).axes), seed=seed, device="cpu",
                       custom_entrypoint=entry or entrypoint_from(d), **kw)


def test_custom_inputs_deterministic_per_seed():
    a, b, c = run(1), run(1), run(2)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])


def test_entrypoint_gets_axes_and_scalars():
    seen = {}

    def entry(axes_and_scalars, device):
        seen.update(axes_and_scalars)
        seen["device"] = device
        return {"x": torch.zeros(16)}

    run(1, entry=entry)
    assert seen["n"] == 16 and seen["scale"] == 0.5 and seen["device"] == torch.device("cpu")


def test_custom_inputs_ignore_and_preserve_global_rng():
    torch.manual_seed(0)
    random.seed(0)
    numpy.random.seed(0)
    a = run(3)[0]
    after = (torch.randn(4), random.random(), numpy.random.rand())
    torch.manual_seed(0)
    random.seed(0)
    numpy.random.seed(0)
    expected_after = (torch.randn(4), random.random(), numpy.random.rand())
    assert torch.equal(after[0], expected_after[0]) and after[1:] == expected_after[1:]  # state untouched
    torch.manual_seed(12345)  # a solution reseeding the global RNG changes nothing
    assert torch.equal(run(3)[0], a)


def test_scalar_result_for_shape_null_input_is_checked():
    def entry(axes_and_scalars, device):
        return {"x": torch.zeros(16), "scale": torch.tensor(2.0)}

    w = build_workload({"x": {"type": "custom"}, "scale": {"type": "custom"}}, {"n": 16})
    notes = []
    _, scale = run(1, w=w, entry=entry, notes=notes)
    assert scale == 2.0 and type(scale) is float and any("scale" in n for n in notes)


FIXED_GENERATOR_ENTRY = '''
def get_inputs(axes_and_scalars, device):
    g = torch.Generator(device=device)
    g.manual_seed(42)
    fresh = torch.Generator(device=device)  # never seeded: torch's fixed default seed
    return {"x": torch.randn(axes_and_scalars["n"], generator=g, device=device),
            "y": torch.randn(axes_and_scalars["n"], generator=fresh, device=device)}
'''


def test_private_fixed_seed_generators_follow_the_run_seed():
    d = build_definition({"x": {"shape": ["n"], "dtype": "float32"}, "y": {"shape": ["n"], "dtype": "float32"}},
                         axes={"n": {"type": "var"}}, entrypoint_source=FIXED_GENERATOR_ENTRY, entrypoint="get_inputs")
    w = build_workload({"x": {"type": "custom"}, "y": {"type": "custom"}}, {"n": 32})
    a, b, c = run(1, d, w), run(1, d, w), run(2, d, w)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])
    assert not torch.equal(a[0], torch.randn(32, generator=torch.Generator().manual_seed(42)))
    assert torch.Generator.__name__ == "Generator"  # restored after the call


def test_missing_name_is_a_reference_error():
    def entry(axes_and_scalars, device):
        return {"other": torch.zeros(16)}

    with pytest.raises(InputError) as info:
        run(1, entry=entry)
    assert "['x']" in str(info.value) and "other" in str(info.value) and info.value.blame == "reference"


def test_entrypoint_exception_is_a_reference_error():
    def entry(axes_and_scalars, device):
        raise ValueError("boom")

    with pytest.raises(InputError) as info:
        run(1, entry=entry)
    assert "boom" in str(info.value) and info.value.blame == "reference"


def test_non_mapping_result_rejected():
    with pytest.raises(InputError):
        call_entrypoint(lambda a, d: [1, 2], {}, torch.device("cpu"), 0)


def test_wrong_shape_rejected():
    with pytest.raises(InputError) as info:
        run(1, entry=lambda a, d: {"x": torch.zeros(15)})
    assert "(15,)" in str(info.value) and "(16,)" in str(info.value)


def test_float_dtype_difference_is_cast_and_noted():
    notes = []
    (x, _) = run(1, entry=lambda a, d: {"x": torch.ones(16, dtype=torch.float64)}, notes=notes)
    assert x.dtype == torch.float32 and any("cast" in n for n in notes)


def test_int_for_float_dtype_rejected():
    with pytest.raises(InputError) as info:
        run(1, entry=lambda a, d: {"x": torch.ones(16, dtype=torch.int64)})
    assert "int64" in str(info.value)


def test_non_tensor_for_tensor_input_rejected():
    with pytest.raises(InputError):
        run(1, entry=lambda a, d: {"x": [0.0] * 16})


def test_custom_without_entrypoint_is_an_error():
    d = definition()
    with pytest.raises(InputError):
        make_inputs(d, workload(), d.resolve_axes({"n": 16}), seed=1, device="cpu", custom_entrypoint=None)


def test_entrypoint_not_called_when_nothing_is_custom():
    calls = []
    d = definition()
    w = build_workload({"scale": {"type": "scalar", "value": 1.0}}, {"n": 4})
    make_inputs(d, w, d.resolve_axes(w.axes), seed=1, device="cpu", custom_entrypoint=lambda a, dev: calls.append(1))
    assert calls == []


def test_results_are_detached():
    def entry(axes_and_scalars, device):
        return {"x": torch.zeros(16, requires_grad=True) * 2}

    assert not run(1, entry=entry)[0].requires_grad
