"""Workloads: concrete var-axis values, where each input comes from, and the tolerance."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from solbench.spec.definition import check_keys
from solbench.spec.errors import SpecError

INPUT_KINDS = ("random", "scalar", "safetensors", "custom")


@dataclass(frozen=True)
class InputSource:
    kind: str  # one of INPUT_KINDS
    value: int | float | bool | None = None  # scalar
    path: str | None = None  # safetensors
    tensor_key: str | None = None  # safetensors

    @classmethod
    def from_dict(cls, name: str, data: dict) -> InputSource:
        if not isinstance(data, dict):
            raise SpecError(f"input {name!r} must be an object")
        kind = data.get("type")
        what = f"input {name!r}"
        if kind == "random" or kind == "custom":
            check_keys(data, {"type"}, what)
            return cls(kind)
        if kind == "scalar":
            check_keys(data, {"type", "value"}, what)
            value = data.get("value")
            if not isinstance(value, (int, float, bool)):
                raise SpecError(f"{what}: scalar value must be a number or bool, got {value!r}")
            return cls(kind, value=value)
        if kind == "safetensors":
            check_keys(data, {"type", "path", "tensor_key"}, what)
            path, key = data.get("path"), data.get("tensor_key")
            if not isinstance(path, str) or not path or not isinstance(key, str) or not key:
                raise SpecError(f"{what}: safetensors input needs 'path' and 'tensor_key'")
            return cls(kind, path=path, tensor_key=key)
        raise SpecError(f"{what} has type {kind!r}; expected one of {', '.join(INPUT_KINDS)}")

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"type": self.kind}
        if self.kind == "scalar":
            out["value"] = self.value
        if self.kind == "safetensors":
            out["path"], out["tensor_key"] = self.path, self.tensor_key
        return out


@dataclass(frozen=True)
class Tolerance:
    max_atol: float = 1e-2
    max_rtol: float = 1e-2
    required_matched_ratio: float = 0.99
    max_error_cap: float | None = None
    allow_negative_inf: bool = False

    @classmethod
    def from_dict(cls, data: dict | None) -> Tolerance:
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise SpecError("tolerance must be an object")
        data = dict(data)
        if "required_match_ratio" in data:  # the published data's spelling
            if "required_matched_ratio" in data and data["required_matched_ratio"] != data["required_match_ratio"]:
                raise SpecError("tolerance gives both required_matched_ratio and required_match_ratio, differently")
            data["required_matched_ratio"] = data.pop("required_match_ratio")
        check_keys(data, {"max_atol", "max_rtol", "required_matched_ratio", "max_error_cap",
                          "allow_negative_inf"}, "tolerance")
        values = {}
        for key in ("max_atol", "max_rtol", "required_matched_ratio", "max_error_cap"):
            if data.get(key) is None:
                continue
            v = data[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise SpecError(f"tolerance {key} must be a finite non-negative number, got {v!r}")
            values[key] = float(v)
        if values.get("required_matched_ratio", 0.0) > 1:
            raise SpecError("tolerance required_matched_ratio must be in [0, 1]")
        if "allow_negative_inf" in data:
            if not isinstance(data["allow_negative_inf"], bool):
                raise SpecError("tolerance allow_negative_inf must be true or false")
            values["allow_negative_inf"] = data["allow_negative_inf"]
        return cls(**values)

    def to_dict(self) -> dict:
        return {"max_atol": self.max_atol, "max_rtol": self.max_rtol,
                "required_matched_ratio": self.required_matched_ratio,
                "max_error_cap": self.max_error_cap, "allow_negative_inf": self.allow_negative_inf}


@dataclass(frozen=True)
class Workload:
    uuid: str
    axes: dict[str, int]
    inputs: dict[str, InputSource]
    tolerance: Tolerance = field(default_factory=Tolerance)

    @classmethod
    def from_dict(cls, data: dict) -> Workload:
        if not isinstance(data, dict):
            raise SpecError("workload must be a JSON object")
        check_keys(data, {"uuid", "axes", "inputs", "tolerance"}, "workload")
        uuid = data.get("uuid")
        if not isinstance(uuid, str) or not uuid:
            raise SpecError("workload has no uuid")
        axes = data.get("axes", {})
        if not isinstance(axes, dict):
            raise SpecError(f"workload {uuid}: axes must be an object")
        for name, value in axes.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(f"workload {uuid}: axis {name!r} must be a non-negative integer, got {value!r}")
        inputs = data.get("inputs", {})
        if not isinstance(inputs, dict):
            raise SpecError(f"workload {uuid}: inputs must be an object")
        try:
            return cls(uuid, dict(axes), {k: InputSource.from_dict(k, v) for k, v in inputs.items()},
                       Tolerance.from_dict(data.get("tolerance")))
        except SpecError as exc:
            raise SpecError(f"workload {uuid}: {exc}") from None

    def to_dict(self) -> dict:
        return {"uuid": self.uuid, "axes": dict(self.axes),
                "inputs": {k: v.to_dict() for k, v in self.inputs.items()},
                "tolerance": self.tolerance.to_dict()}

    def source_of(self, input_name: str) -> InputSource:
        """Inputs a workload does not mention are random."""
        return self.inputs.get(input_name, InputSource("random"))

    def scalar_values(self) -> dict[str, int | float | bool]:
        return {k: v.value for k, v in self.inputs.items() if v.kind == "scalar"}
