"""Workloads: concrete var-axis values, where each input comes from, and the tolerance.

Typed models (`spec.model`): the fields are the format. Keys that only describe (`description`,
`x-...`) are allowed and dropped; any other unknown key is refused, since it could change meaning.
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, field_validator, model_validator
from pydantic.dataclasses import dataclass

from solbench.spec.definition import check_keys
from solbench.spec.model import FORMAT, FormatModel, absent

INPUT_KINDS = ("random", "scalar", "safetensors", "custom")
_KEYS_BY_KIND = {"random": {"type"}, "custom": {"type"}, "scalar": {"type", "value"},
                 "safetensors": {"type", "path", "tensor_key"}}
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Size = Annotated[StrictInt, Field(ge=0)]


@dataclass(config=FORMAT)
class InputSource(FormatModel):
    kind: Literal["random", "scalar", "safetensors", "custom"] = Field(serialization_alias="type")
    value: StrictBool | StrictInt | StrictFloat | None = Field(default=None, exclude_if=absent)
    path: str | None = Field(default=None, exclude_if=absent)  # safetensors
    tensor_key: str | None = Field(default=None, exclude_if=absent)  # safetensors

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        kind = data.get("type")
        if kind not in _KEYS_BY_KIND:
            raise ValueError(f"type {kind!r}; expected one of {', '.join(INPUT_KINDS)}")
        check_keys(data, _KEYS_BY_KIND[kind], "input")
        return {"kind": kind, **{k: data[k] for k in ("value", "path", "tensor_key") if k in data}}

    @field_validator("value", mode="before")
    @classmethod
    def _scalar(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, (int, float, bool)):
            raise ValueError(f"a scalar value must be a number or bool, got {value!r}")
        return value

    @model_validator(mode="after")
    def _complete(self) -> InputSource:
        if self.kind == "scalar" and self.value is None:
            raise ValueError("a scalar input needs a number or bool `value`")
        if self.kind == "safetensors" and not (self.path and self.tensor_key):
            raise ValueError("a safetensors input needs 'path' and 'tensor_key'")
        return self


@dataclass(config=FORMAT)
class Tolerance(FormatModel):
    max_atol: NonNegative = 1e-2
    max_rtol: NonNegative = 1e-2
    required_matched_ratio: Annotated[NonNegative, Field(le=1)] = 0.99
    max_error_cap: NonNegative | None = None
    allow_negative_inf: StrictBool = False

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any) -> Any:
        """The published data's spelling `required_match_ratio`; null means the default."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "required_match_ratio" in data:
            if "required_matched_ratio" in data and data["required_matched_ratio"] != data["required_match_ratio"]:
                raise ValueError("gives both required_matched_ratio and required_match_ratio, differently")
            data["required_matched_ratio"] = data.pop("required_match_ratio")
        check_keys(data, {"max_atol", "max_rtol", "required_matched_ratio", "max_error_cap",
                          "allow_negative_inf"}, "tolerance")
        return {k: v for k, v in data.items() if v is not None or k == "max_error_cap"}

    @field_validator("max_atol", "max_rtol", "required_matched_ratio", "max_error_cap", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, type(None))):
            raise ValueError(f"must be a finite non-negative number, got {value!r}")
        return value


@dataclass(config=FORMAT)
class Workload(FormatModel):
    uuid: Annotated[str, Field(min_length=1, strict=True)]
    axes: dict[str, Size] = field(default_factory=dict)
    inputs: dict[str, InputSource] = field(default_factory=dict)
    tolerance: Tolerance = field(default_factory=Tolerance)

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        check_keys(data, {"uuid", "axes", "inputs", "tolerance"}, "workload")
        if data.get("tolerance", 0) is None:
            data = {k: v for k, v in data.items() if k != "tolerance"}
        return data

    @classmethod
    def label(cls, data: Any) -> str | None:
        """How an error in `data` names it: by its uuid."""
        uuid = data.get("uuid") if isinstance(data, dict) else None
        return f"workload {uuid}" if isinstance(uuid, str) and uuid else "workload"

    def source_of(self, input_name: str) -> InputSource:
        """Inputs a workload does not mention are random."""
        return self.inputs.get(input_name, InputSource("random"))

    def scalar_values(self) -> dict[str, int | float | bool]:
        return {k: v.value for k, v in self.inputs.items() if v.kind == "scalar"}
