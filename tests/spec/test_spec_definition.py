"""Definitions: what loads, every validation error, and axis resolution."""

from __future__ import annotations

import pytest

from solbench.spec import Definition, SpecError, TensorSpec
from tests.spec.spec_builders import REFERENCE, make_definition


def load(**overrides) -> Definition:
    return Definition.from_dict(make_definition(**overrides))


def test_valid_definition_loads():
    d = load()
    assert d.name == "scale_rows"
    assert d.op_type == "elementwise"
    assert list(d.inputs) == ["x", "weight"]  # order is call order
    assert list(d.outputs) == ["y"]
    assert d.axes["m"].kind == "var" and d.axes["m"].description == "rows"
    assert d.axes["n"].kind == "const" and d.axes["n"].value == 8
    assert d.axes["mn"].kind == "expr" and d.axes["mn"].expression == "m * n"
    assert d.inputs["x"] == TensorSpec(("m", "n"), "float32")
    assert d.reference == REFERENCE
    assert d.constraints == ()
    assert d.custom_inputs_entrypoint is None


def test_round_trip():
    d = load(constraints=["m >= 1"], hf_id="org/model")
    again = Definition.from_dict(d.to_dict())
    assert again == d
    assert again.to_dict() == d.to_dict()


def test_scalar_and_literal_shapes():
    d = load(inputs={"x": {"shape": ["m", "8"], "dtype": "float32"},
                     "weight": {"shape": [8], "dtype": "float32"}},
             outputs={"y": {"shape": None, "dtype": "float32"}, "z": {"shape": [], "dtype": "int64"}})
    assert d.inputs["x"].shape == ("m", "8")
    assert d.inputs["weight"].shape == ("8",)  # integers become digit strings
    axes = d.resolve_axes({"m": 3})
    assert d.input_shapes(axes) == {"x": (3, 8), "weight": (8,)}
    assert d.output_shapes(axes) == {"y": None, "z": ()}


def test_dtype_alias_is_canonicalised():
    d = load(outputs={"y": {"shape": ["m", "n"], "dtype": "float4_e2m1"}})
    assert d.outputs["y"].dtype == "float4_e2m1fn_x2"


@pytest.mark.parametrize("key", ["name", "axes", "inputs", "outputs", "reference"])
def test_missing_required_key(key):
    data = make_definition()
    del data[key]
    with pytest.raises(SpecError, match=f"definition: {key}: is missing"):
        Definition.from_dict(data)


def test_not_an_object():
    with pytest.raises(SpecError, match="definition: must be an object"):
        Definition.from_dict([])  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "   ", 3, None])
def test_bad_name(name):
    with pytest.raises(SpecError, match="name"):
        load(name=name)


@pytest.mark.parametrize("key", ["axes", "inputs", "outputs"])
def test_sections_must_be_objects(key):
    with pytest.raises(SpecError, match=key):
        load(**{key: []})


@pytest.mark.parametrize("key", ["constraint", "tolerance", "destination_passing_style", "inputs_order"])
def test_unknown_meaning_changing_key_is_refused(key):
    with pytest.raises(SpecError, match=f"unknown key {key!r}"):
        load(**{key: 1})


@pytest.mark.parametrize("key", ["tags", "notes", "comment", "source", "metadata", "solbench", "x-origin",
                                 "x_origin", "_private"])
def test_harmless_metadata_keys_are_kept(key):
    d = load(**{key: "anything"})
    assert d.extra == {key: "anything"}
    assert key not in d.to_dict()  # the model's written form is the schema's (docs/formats/definition.schema.json)


def test_unknown_key_in_axis_and_tensor():
    with pytest.raises(SpecError, match="axis 'm' has unknown key 'max'"):
        load(axes={"m": {"type": "var", "max": 4}, "n": {"type": "const", "value": 8}})
    with pytest.raises(SpecError, match="outputs.y: tensor has unknown key 'layout'"):
        load(outputs={"y": {"shape": ["m", "n"], "dtype": "float32", "layout": "col"}})


@pytest.mark.parametrize("dtype", ["float", "fp32", "bf16", "uint32", "complex64", "Float32", ""])
def test_bad_dtype(dtype):
    with pytest.raises(SpecError, match="inputs.x.dtype: unknown dtype"):
        load(inputs={"x": {"shape": ["m", "n"], "dtype": dtype}, "weight": {"shape": ["n"], "dtype": "float32"}})


def test_missing_dtype():
    with pytest.raises(SpecError, match="no dtype"):
        load(outputs={"y": {"shape": ["m", "n"]}})


@pytest.mark.parametrize("shape", ["m", [["m"]], [1.5], {"m": 1}])
def test_bad_shape(shape):
    with pytest.raises(SpecError, match="shape"):
        load(outputs={"y": {"shape": shape, "dtype": "float32"}})


@pytest.mark.parametrize("entry", ["k", "-1", "M"])
def test_undeclared_axis_in_shape(entry):
    with pytest.raises(SpecError, match=f"uses undeclared axis {entry!r}"):
        load(outputs={"y": {"shape": ["m", entry], "dtype": "float32"}})


@pytest.mark.parametrize(("axis", "message"), [
    ({"type": "size"}, "expected const, var or expr"),
    ({}, "expected const, var or expr"),
    ({"type": "const"}, "const axis"),
    ({"type": "const", "value": -1}, "non-negative"),
    ({"type": "const", "value": 2.5}, "non-integer"),
    ({"type": "const", "value": True}, "boolean"),
    ({"type": "expr"}, "expression"),
    ({"type": "expr", "expression": "m.x"}, "not allowed"),
    ({"type": "expr", "expression": "m * k"}, "unknown axes \\['k'\\]"),
    ("var", "must be an object"),
])
def test_bad_axes(axis, message):
    with pytest.raises(SpecError, match=message):
        load(axes={"m": {"type": "var"}, "n": {"type": "const", "value": 8}, "bad": axis})


def test_input_named_like_axis():
    with pytest.raises(SpecError, match="inputs named like axes"):
        load(inputs={"x": {"shape": ["m", "n"], "dtype": "float32"}, "weight": {"shape": ["n"], "dtype": "float32"},
                     "n": {"shape": None, "dtype": "int64"}},
             reference="def run(x, weight, n):\n    return x\n")


def test_input_and_output_names_overlap():
    with pytest.raises(SpecError, match="both inputs and outputs"):
        load(outputs={"x": {"shape": ["m", "n"], "dtype": "float32"}})


def test_no_outputs():
    with pytest.raises(SpecError, match="no outputs"):
        load(outputs={})


@pytest.mark.parametrize(("reference", "message"), [
    ("import torch\n\ndef forward(x, weight):\n    return x\n", "no top-level `def run`"),
    ("async def run(x, weight):\n    return x\n", "no top-level `def run`"),
    ("class K:\n    def run(self, x, weight):\n        return x\n", "no top-level `def run`"),
    ("def run(weight, x):\n    return x\n", "does not take the inputs in order"),
    ("def run(x):\n    return x\n", "does not take the inputs in order"),
    ("def run(x, weight, eps):\n    return x\n", "does not take the inputs in order"),
    ("def run(x, weight:\n    return x\n", "does not parse: line 1"),
    ("", "non-empty"),
    ("   \n", "non-empty"),
    (["def run(x, weight): pass"], "reference: must be a string"),
])
def test_bad_reference(reference, message):
    with pytest.raises(SpecError, match=message):
        load(reference=reference)


def test_reference_positional_only_and_keyword_only_params():
    d = load(reference="def run(x, /, weight, *, scale=1.0):\n    return x * weight * scale\n")
    assert d.reference_functions()["run"] == ["x", "weight"]


def test_custom_inputs_entrypoint():
    ref = REFERENCE + "\ndef make_inputs(axes, device):\n    return {}\n"
    assert load(reference=ref, custom_inputs_entrypoint="make_inputs").custom_inputs_entrypoint == "make_inputs"
    with pytest.raises(SpecError, match="custom_inputs_entrypoint 'make_inputs' is not a top-level function"):
        load(custom_inputs_entrypoint="make_inputs")


def test_constraints_parse_at_load():
    assert load(constraints=["m % 2 == 0", "mn <= 4096"]).constraints == ("m % 2 == 0", "mn <= 4096")
    with pytest.raises(SpecError, match="not allowed"):
        load(constraints=["m.bit_length() < 3"])
    with pytest.raises(SpecError, match="unknown names \\['k'\\]"):
        load(constraints=["k > 1"])
    with pytest.raises(SpecError, match="list of expressions"):
        load(constraints="m > 1")
    with pytest.raises(SpecError, match="list of expressions"):
        load(constraints=[1])


def test_constraint_may_name_an_input():
    load(constraints=["weight > 0"])  # checked only when a workload gives a value


def test_constraint_violated_per_workload():
    d = load(constraints=["m % 2 == 0", "mn <= 64"])
    assert d.resolve_axes({"m": 8})["mn"] == 64
    with pytest.raises(SpecError, match="constraint 'm % 2 == 0' does not hold"):
        d.resolve_axes({"m": 3})
    with pytest.raises(SpecError, match="constraint 'mn <= 64' does not hold"):
        d.resolve_axes({"m": 10})


# -- resolve_axes ---------------------------------------------------------------------------

def test_resolve_consts_vars_exprs():
    d = load()
    assert d.resolve_axes({"m": 5}) == {"m": 5, "n": 8, "mn": 40}


def test_resolve_exprs_depending_on_exprs():
    d = load(axes={"m": {"type": "var"}, "n": {"type": "const", "value": 8},
                   # declared before what it depends on, so order of declaration must not matter
                   "c": {"type": "expr", "expression": "b + 1"},
                   "b": {"type": "expr", "expression": "a * 2"},
                   "a": {"type": "expr", "expression": "m + n"}})
    assert d.resolve_axes({"m": 2}) == {"m": 2, "n": 8, "a": 10, "b": 20, "c": 21}


def test_resolve_cycle():
    d = load(axes={"m": {"type": "var"}, "n": {"type": "const", "value": 8},
                   "a": {"type": "expr", "expression": "b + 1"},
                   "b": {"type": "expr", "expression": "a + 1"}})
    with pytest.raises(SpecError, match="cycle"):
        d.resolve_axes({"m": 2})


def test_resolve_self_reference_is_a_cycle():
    d = load(axes={"m": {"type": "var"}, "n": {"type": "const", "value": 8},
                   "a": {"type": "expr", "expression": "a + 1"}})
    with pytest.raises(SpecError, match="cycle"):
        d.resolve_axes({"m": 2})


def test_resolve_missing_var():
    with pytest.raises(SpecError, match="does not set var axes \\['m'\\]"):
        load().resolve_axes({})


def test_resolve_wrong_const():
    with pytest.raises(SpecError, match="const axis 'n' to 9"):
        load().resolve_axes({"m": 1, "n": 9})
    assert load().resolve_axes({"m": 1, "n": 8})["n"] == 8  # restating a const is fine


def test_resolve_expr_given_by_workload():
    assert load().resolve_axes({"m": 2, "mn": 16})["mn"] == 16
    with pytest.raises(SpecError, match="expr axis 'mn' to 15"):
        load().resolve_axes({"m": 2, "mn": 15})


def test_resolve_expr_must_be_a_size():
    d = load(axes={"m": {"type": "var"}, "n": {"type": "const", "value": 8},
                   "half": {"type": "expr", "expression": "m / 2"},
                   "neg": {"type": "expr", "expression": "n - m"}})
    assert d.resolve_axes({"m": 4}) == {"m": 4, "n": 8, "half": 2, "neg": 4}
    with pytest.raises(SpecError, match="non-integer"):
        d.resolve_axes({"m": 3})
    with pytest.raises(SpecError, match="non-negative"):
        d.resolve_axes({"m": 10})


def test_resolve_expr_division_by_zero():
    d = load(axes={"m": {"type": "var"}, "n": {"type": "const", "value": 8},
                   "q": {"type": "expr", "expression": "n // m"}})
    with pytest.raises(SpecError, match="division by zero"):
        d.resolve_axes({"m": 0})


@pytest.mark.parametrize("value", [-1, 2.5, True, "4"])
def test_resolve_bad_var_value(value):
    with pytest.raises(SpecError):
        load().resolve_axes({"m": value})


def test_resolve_undeclared_axis():
    with pytest.raises(SpecError, match="does not declare"):
        load().resolve_axes({"m": 1, "k": 2})


def test_resolve_passes_through_axis_named_like_an_input():
    d = load(inputs={"x": {"shape": ["m", "n"], "dtype": "float32"}, "weight": {"shape": ["n"], "dtype": "float32"},
                     "top_k": {"shape": None, "dtype": "int64"}},
             reference="def run(x, weight, top_k):\n    return x\n")
    values = d.resolve_axes({"m": 2, "top_k": 5})
    assert values["top_k"] == 5
    assert d.input_shapes(values) == {"x": (2, 8), "weight": (8,), "top_k": None}


@pytest.mark.parametrize("key", ["extra", "kind"])
def test_the_models_own_field_names_are_not_a_way_around_the_key_check(key):
    with pytest.raises(SpecError, match=f"unknown key {key!r}"):
        load(**{key: {"tolerance": 1}})
    with pytest.raises(SpecError, match=f"unknown key {key!r}"):
        load(axes={"m": {"type": "var", key: "const"}, "n": {"type": "const", "value": 8}})
