"""Workloads: input sources, tolerances and the workload.jsonl file."""

from __future__ import annotations

import json

import pytest

from solbench.spec import Definition, InputSource, SpecError, Tolerance, Workload
from solbench.spec.problem import check_workload, load_workloads
from tests.spec.spec_builders import make_definition, make_workload, write_problem


def test_valid_workload():
    w = Workload.from_dict(make_workload())
    assert w.uuid == "w-1"
    assert w.axes == {"m": 4}
    assert w.inputs["x"] == InputSource("random")
    assert w.tolerance == Tolerance(max_atol=1e-4, max_rtol=1e-4)


def test_round_trip():
    w = Workload.from_dict(make_workload(inputs={"x": {"type": "scalar", "value": 2.5},
                                                 "weight": {"type": "safetensors", "path": "b.safetensors",
                                                            "tensor_key": "w"}}))
    assert Workload.from_dict(w.to_dict()) == w


def test_input_kinds():
    w = Workload.from_dict(make_workload(inputs={
        "a": {"type": "random"},
        "b": {"type": "scalar", "value": 3},
        "c": {"type": "scalar", "value": 0.5},
        "d": {"type": "scalar", "value": True},
        "e": {"type": "safetensors", "path": "blobs/x.safetensors", "tensor_key": "t"},
        "f": {"type": "custom"},
    }))
    assert [w.inputs[k].kind for k in "abcdef"] == ["random", "scalar", "scalar", "scalar", "safetensors", "custom"]
    assert w.inputs["e"].path == "blobs/x.safetensors" and w.inputs["e"].tensor_key == "t"
    assert w.scalar_values() == {"b": 3, "c": 0.5, "d": True}
    assert w.source_of("not_mentioned") == InputSource("random")


@pytest.mark.parametrize(("source", "message"), [
    ({"type": "normal"}, "expected one of"),
    ({}, "expected one of"),
    ({"type": "scalar"}, "inputs.x: a scalar input needs a number or bool"),
    ({"type": "scalar", "value": "3"}, "inputs.x.value: a scalar value must be a number or bool"),
    ({"type": "scalar", "value": None}, "inputs.x: a scalar input needs a number or bool"),
    ({"type": "safetensors", "path": "a.safetensors"}, "needs 'path' and 'tensor_key'"),
    ({"type": "safetensors", "tensor_key": "k"}, "needs 'path' and 'tensor_key'"),
    ({"type": "safetensors", "path": "", "tensor_key": "k"}, "needs 'path' and 'tensor_key'"),
    ({"type": "random", "std": 2}, "unknown key 'std'"),
    ({"type": "scalar", "value": 1, "dtype": "int32"}, "unknown key 'dtype'"),
    ("random", "inputs.x: must be an object"),
])
def test_bad_input_source(source, message):
    with pytest.raises(SpecError, match=message):
        Workload.from_dict(make_workload(inputs={"x": source}))


def test_input_source_harmless_keys_allowed():
    w = Workload.from_dict(make_workload(inputs={"x": {"type": "random", "description": "activations"}}))
    assert w.inputs["x"].kind == "random"


def test_tolerance_defaults():
    w = Workload.from_dict(make_workload(tolerance=None))
    assert w.tolerance == Tolerance(1e-2, 1e-2, 0.99, None, False)
    del_tol = make_workload()
    del del_tol["tolerance"]
    assert Workload.from_dict(del_tol).tolerance == Tolerance()
    partial = Tolerance.from_dict({"max_atol": 0.5})
    assert (partial.max_atol, partial.max_rtol, partial.required_matched_ratio) == (0.5, 1e-2, 0.99)


def test_tolerance_all_fields():
    t = Tolerance.from_dict({"max_atol": 1, "max_rtol": 0.25, "required_matched_ratio": 1,
                             "max_error_cap": 8, "allow_negative_inf": True})
    assert t == Tolerance(1.0, 0.25, 1.0, 8.0, True)
    assert isinstance(t.max_atol, float)
    assert Tolerance.from_dict(t.to_dict()) == t


def test_required_match_ratio_alias():
    assert Tolerance.from_dict({"required_match_ratio": 0.9}).required_matched_ratio == 0.9
    both = Tolerance.from_dict({"required_match_ratio": 0.9, "required_matched_ratio": 0.9})
    assert both.required_matched_ratio == 0.9
    # the canonical spelling is what solbench writes back
    assert "required_match_ratio" not in both.to_dict()


def test_required_match_ratio_conflict():
    with pytest.raises(SpecError, match="differently"):
        Tolerance.from_dict({"required_match_ratio": 0.9, "required_matched_ratio": 0.95})


def test_alias_does_not_mutate_input():
    data = {"required_match_ratio": 0.9}
    Tolerance.from_dict(data)
    assert data == {"required_match_ratio": 0.9}


@pytest.mark.parametrize("key", ["atol", "rtol", "max_abs_error", "matched_ratio"])
def test_unknown_tolerance_key(key):
    with pytest.raises(SpecError, match=f"unknown key {key!r}"):
        Tolerance.from_dict({key: 0.1})


@pytest.mark.parametrize(("data", "message"), [
    ({"max_atol": -1}, "max_atol: must be at least 0"),
    ({"max_rtol": float("nan")}, "max_rtol: must be a finite number"),
    ({"max_atol": float("inf")}, "max_atol: must be a finite number"),
    ({"max_atol": "0.1"}, "finite non-negative"),
    ({"max_atol": True}, "finite non-negative"),
    ({"max_error_cap": -0.5}, "max_error_cap: must be at least 0"),
    ({"required_matched_ratio": 1.5}, "required_matched_ratio: must be at most 1"),
    ({"required_match_ratio": 2}, "required_matched_ratio: must be at most 1"),
    ({"allow_negative_inf": 1}, "allow_negative_inf: must be true or false"),
    ({"allow_negative_inf": "yes"}, "allow_negative_inf: must be true or false"),
])
def test_bad_tolerance_values(data, message):
    with pytest.raises(SpecError, match=message):
        Tolerance.from_dict(data)


def test_tolerance_not_an_object():
    with pytest.raises(SpecError, match="workload w-1: tolerance: must be an object"):
        Workload.from_dict(make_workload(tolerance=[0.1]))


@pytest.mark.parametrize(("data", "message"), [
    ({"uuid": ""}, "uuid: must not be empty"),
    ({"uuid": 3}, "uuid: must be a string"),
    ({"axes": []}, "w-1: axes: must be an object"),
    ({"axes": {"m": -1}}, "w-1: axes.m: must be at least 0"),
    ({"axes": {"m": 2.0}}, "w-1: axes.m: must be an integer"),
    ({"axes": {"m": True}}, "w-1: axes.m: must be an integer"),
    ({"inputs": []}, "w-1: inputs: must be an object"),
    ({"seed": 3}, "unknown key 'seed'"),
])
def test_bad_workload(data, message):
    with pytest.raises(SpecError, match=message):
        Workload.from_dict(make_workload(**data))


def test_workload_error_names_the_uuid():
    with pytest.raises(SpecError, match="workload w-1: inputs.x: type 'bogus'"):
        Workload.from_dict(make_workload(inputs={"x": {"type": "bogus"}}))


def test_workload_without_uuid_key():
    data = make_workload()
    del data["uuid"]
    with pytest.raises(SpecError, match="workload: uuid: is missing"):
        Workload.from_dict(data)


# -- workload.jsonl -------------------------------------------------------------------------

def test_load_workloads_skips_blank_lines(tmp_path):
    path = tmp_path / "workload.jsonl"
    path.write_text(json.dumps(make_workload("a")) + "\n\n   \n" + json.dumps(make_workload("b")))
    assert [w.uuid for w in load_workloads(path)] == ["a", "b"]


def test_duplicate_uuids(tmp_path):
    path = tmp_path / "workload.jsonl"
    path.write_text("\n".join(json.dumps(make_workload(u)) for u in ("a", "b", "a")))
    with pytest.raises(SpecError, match="workload.jsonl:3: duplicate workload uuid a"):
        load_workloads(path)


def test_malformed_line_reports_line_number(tmp_path):
    path = tmp_path / "workload.jsonl"
    path.write_text(json.dumps(make_workload("a")) + "\n" + '{"uuid": "b", "axes": {"m": 4}' + "\n")
    with pytest.raises(SpecError, match=r"workload\.jsonl:2: not valid JSON"):
        load_workloads(path)


def test_invalid_workload_reports_line_number(tmp_path):
    path = tmp_path / "workload.jsonl"
    path.write_text(json.dumps(make_workload("a")) + "\n" + json.dumps(make_workload("b", axes={"m": -3})))
    with pytest.raises(SpecError, match=r"workload\.jsonl:2: workload b: axes\.m: must be at least 0, got -3$"):
        load_workloads(path)


def test_non_object_line(tmp_path):
    path = tmp_path / "workload.jsonl"
    path.write_text("[1, 2]\n")
    with pytest.raises(SpecError, match=r":1: workload: must be an object, got \[1, 2\]"):
        load_workloads(path)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load_workloads(tmp_path / "workload.jsonl")


def test_workloads_checked_against_definition(tmp_path):
    definition = Definition.from_dict(make_definition())
    path = write_problem(tmp_path, workloads=[make_workload("a"), make_workload("b", axes={})]) / "workload.jsonl"
    assert len(load_workloads(path)) == 2  # without a definition only the format is checked
    with pytest.raises(SpecError, match=r"workload\.jsonl:2: .*does not set var axes"):
        load_workloads(path, definition)


def test_check_workload_inputs():
    definition = Definition.from_dict(make_definition())
    ok = Workload.from_dict(make_workload())
    assert check_workload(definition, ok) == {"m": 4, "n": 8, "mn": 32}
    # inputs the workload leaves out are random
    assert check_workload(definition, Workload.from_dict(make_workload(inputs={}))) == {"m": 4, "n": 8, "mn": 32}
    with pytest.raises(SpecError, match="does not declare: \\['bias'\\]"):
        check_workload(definition, Workload.from_dict(make_workload(inputs={"bias": {"type": "random"}})))


def test_custom_inputs_need_an_entrypoint():
    definition = Definition.from_dict(make_definition())
    custom = Workload.from_dict(make_workload(inputs={"x": {"type": "custom"}}))
    with pytest.raises(SpecError, match="no custom_inputs_entrypoint"):
        check_workload(definition, custom)
    ref = make_definition()["reference"] + "\ndef gen(axes, device):\n    return {}\n"
    with_entry = Definition.from_dict(make_definition(reference=ref, custom_inputs_entrypoint="gen"))
    check_workload(with_entry, custom)
    # extra custom inputs (made by the entrypoint, never passed to run) are harmless
    check_workload(with_entry, Workload.from_dict(make_workload(inputs={"x": {"type": "custom"},
                                                                        "scratch": {"type": "custom"}})))


def test_an_input_given_in_the_models_field_names_is_refused():
    with pytest.raises(SpecError, match="inputs.x: type None"):
        Workload.from_dict(make_workload(inputs={"x": {"kind": "random", "std": 2}}))
