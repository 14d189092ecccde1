"""Builders for definitions and workloads used by the input-generation tests (imported by name)."""

from __future__ import annotations

from solbench.spec.definition import Definition
from solbench.spec.workload import Workload


def build_definition(inputs: dict, outputs: dict | None = None, axes: dict | None = None, *,
                     entrypoint_source: str = "", entrypoint: str | None = None,
                     op_type: str | None = None) -> Definition:
    """A definition whose reference has the right `run` signature (and optionally an entrypoint)."""
    params = ", ".join(inputs)
    reference = f"import torch\n\n{entrypoint_source}\n\ndef run({params}):\n    raise NotImplementedError\n"
    data = {
        "name": "test_problem",
        "axes": axes or {},
        "inputs": inputs,
        "outputs": outputs or {"out": {"shape": None, "dtype": "float32"}},
        "reference": reference,
        "custom_inputs_entrypoint": entrypoint,
    }
    if op_type is not None:
        data["op_type"] = op_type
    return Definition.from_dict(data)


def build_workload(inputs: dict | None = None, axes: dict | None = None, uuid: str = "w-1") -> Workload:
    return Workload.from_dict({"uuid": uuid, "axes": axes or {}, "inputs": inputs or {}})


def entrypoint_from(definition: Definition):
    """The reference's custom inputs entrypoint as a function (what the worker would import)."""
    namespace: dict = {}
    exec(compile(definition.reference, "<reference>", "exec"), namespace)  # test-only, trusted text
    return namespace[definition.custom_inputs_entrypoint]
