"""Problem definitions: axes, typed inputs/outputs and a reference `run` in Python source."""

from __future__ import annotations

import ast
from dataclasses import field
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic.dataclasses import dataclass

from solbench.spec import axes as axes_eval
from solbench.spec import dtypes
from solbench.spec.errors import SpecError
from solbench.spec.model import FORMAT, FormatModel, absent

# Keys that only describe; anything else unknown could change meaning and is refused.
METADATA_KEYS = frozenset({"description", "tags", "notes", "comment", "source", "metadata", "solbench"})


def check_keys(data: dict, known: set[str], what: str) -> dict[str, Any]:
    """Return unknown-but-harmless keys; refuse unknown keys that could change meaning."""
    extra = {}
    for key in data:
        if key in known:
            continue
        if key in METADATA_KEYS or key.startswith(("_", "x-", "x_")):
            extra[key] = data[key]
            continue
        raise SpecError(f"{what} has unknown key {key!r}; solbench does not know what it means "
                        f"(prefix it with 'x-' if it is only a note)")
    return extra


def _kind_from_type(data: Any, known: set[str], what: str) -> Any:
    """A file's `type` key as the model's `kind`, after refusing keys that could change meaning."""
    if not isinstance(data, dict):
        return data
    check_keys(data, known | {"name"}, what)
    data = {k: v for k, v in data.items() if k in known | {"name"}}
    data["kind"] = data.pop("type", None)
    return data


@dataclass(config=FORMAT)
class Axis(FormatModel):
    name: str = Field(exclude=True)  # the key it is declared under
    kind: Literal["const", "var", "expr"] = Field(serialization_alias="type")
    value: int | None = Field(default=None, exclude_if=absent)
    expression: str | None = Field(default=None, exclude_if=absent)
    description: str | None = Field(default=None, exclude_if=absent)

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any) -> Any:
        name = data.get("name") if isinstance(data, dict) else None
        return _kind_from_type(data, {"type", "value", "expression", "description"}, f"axis {name!r}")

    @field_validator("kind", mode="before")
    @classmethod
    def _known_kind(cls, kind: Any) -> Any:
        if kind not in ("const", "var", "expr"):
            raise ValueError(f"type {kind!r}; expected const, var or expr")
        return kind

    @field_validator("value", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return None if value is None else axes_eval.as_size(value, "const axis value")

    @model_validator(mode="after")
    def _complete(self) -> Axis:
        if self.kind == "const":
            object.__setattr__(self, "value", axes_eval.as_size(self.value, f"const axis {self.name!r}"))
        elif self.kind == "expr":
            axes_eval.parse(self.expression)
        return self


@dataclass(config=FORMAT)
class TensorSpec(FormatModel):
    shape: tuple[str, ...] | None  # None: a Python scalar; (): a 0-d tensor
    dtype: str
    description: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any) -> Any:
        if isinstance(data, dict):
            check_keys(data, {"shape", "dtype", "description"}, "tensor")
            if "dtype" not in data:
                raise ValueError("has no dtype")
            shape = data.get("shape")
            if shape is not None and (not isinstance(shape, list | tuple)
                                      or not all(isinstance(s, str | int) for s in shape)):
                raise ValueError("shape must be a list of axis names or null")
            data = {**data, "shape": None if shape is None else tuple(str(s) for s in shape)}
        return data

    @field_validator("dtype", mode="before")
    @classmethod
    def _canonical(cls, dtype: Any) -> str:
        return dtypes.canonical(dtype)

    def resolve(self, axis_values: dict[str, int]) -> tuple[int, ...] | None:
        if self.shape is None:
            return None
        return tuple(int(s) if s.isdigit() else axis_values[s] for s in self.shape)


DEFINITION_KEYS = {"name", "op_type", "hf_id", "description", "axes", "constraints", "inputs", "outputs",
                   "reference", "custom_inputs_entrypoint"}


@dataclass(config=FORMAT)
class Definition(FormatModel):
    name: str
    axes: dict[str, Axis]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    reference: str
    op_type: str | None = Field(default=None, exclude_if=absent)
    hf_id: str | None = Field(default=None, exclude_if=absent)
    description: str | None = Field(default=None, exclude_if=absent)
    constraints: tuple[str, ...] = Field(default=(), exclude_if=lambda v: not v)
    custom_inputs_entrypoint: str | None = None
    # keys that only describe (`check_keys`): kept for readers (extract's `solbench` record), not written
    extra: Annotated[dict[str, Any], Field(exclude=True)] = field(default_factory=dict, compare=False)

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        extra = check_keys(data, DEFINITION_KEYS, "definition")
        data = {k: v for k, v in data.items() if k not in extra}
        if isinstance(data.get("axes"), dict):  # an axis is named by its key
            data["axes"] = {k: {**v, "name": k} if isinstance(v, dict) else v for k, v in data["axes"].items()}
        if data.get("constraints", ()) is None:
            data["constraints"] = ()
        return {**data, "extra": extra}

    @classmethod
    def label(cls, data: Any) -> str | None:
        return "definition"

    @field_validator("name", mode="before")
    @classmethod
    def _named(cls, name: Any) -> Any:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("definition name must be a non-empty string")
        return name

    @field_validator("constraints", mode="before")
    @classmethod
    def _parsed(cls, constraints: Any) -> Any:
        if not isinstance(constraints, list | tuple) or not all(isinstance(c, str) for c in constraints):
            raise ValueError("definition 'constraints' must be a list of expressions")
        for c in constraints:
            axes_eval.parse(c)
        return tuple(constraints)

    @model_validator(mode="after")
    def _consistent(self) -> Definition:
        self._validate()
        return self

    # -- validation -------------------------------------------------------------------------

    def _validate(self) -> None:
        if not self.outputs:
            raise SpecError("definition declares no outputs")
        overlap = set(self.inputs) & set(self.outputs)
        if overlap:
            raise SpecError(f"names used for both inputs and outputs: {sorted(overlap)}")
        clash = set(self.inputs) & set(self.axes)
        if clash:
            raise SpecError(f"inputs named like axes: {sorted(clash)}")
        for tname, spec in {**self.inputs, **self.outputs}.items():
            for entry in spec.shape or ():
                if not entry.isdigit() and entry not in self.axes:
                    raise SpecError(f"tensor {tname!r} uses undeclared axis {entry!r}")
        for axis in self.axes.values():
            if axis.kind == "expr":
                unknown = axes_eval.names(axis.expression) - set(self.axes)
                if unknown:
                    raise SpecError(f"axis {axis.name!r} refers to unknown axes {sorted(unknown)}")
        for c in self.constraints:
            unknown = axes_eval.names(c) - set(self.axes) - set(self.inputs)
            if unknown:
                raise SpecError(f"constraint {c!r} refers to unknown names {sorted(unknown)}")
        functions = self.reference_functions()
        if "run" not in functions:
            raise SpecError("reference has no top-level `def run`")
        params = functions["run"]
        if params != list(self.inputs):
            raise SpecError(f"reference run{tuple(params)} does not take the inputs in order "
                            f"{tuple(self.inputs)}")
        entry = self.custom_inputs_entrypoint
        if entry is not None and entry not in functions:
            raise SpecError(f"custom_inputs_entrypoint {entry!r} is not a top-level function of the reference")

    def reference_functions(self) -> dict[str, list[str]]:
        """Top-level (non-async) functions of the reference and their positional parameters."""
        if not isinstance(self.reference, str) or not self.reference.strip():
            raise SpecError("reference must be non-empty Python source")
        try:
            tree = ast.parse(self.reference)
        except SyntaxError as exc:
            raise SpecError(f"reference does not parse: line {exc.lineno}: {exc.msg}") from None
        return {
            node.name: [a.arg for a in node.args.posonlyargs + node.args.args]
            for node in tree.body if isinstance(node, ast.FunctionDef)
        }

    # -- axes and shapes --------------------------------------------------------------------

    def dtypes(self) -> list[str]:
        """Every input and output dtype (what a language's CPU refusal looks at)."""
        return [t.dtype for t in {**self.inputs, **self.outputs}.values()]

    def var_axes(self) -> list[str]:
        return [n for n, a in self.axes.items() if a.kind == "var"]

    def resolve_axes(self, workload_axes: dict[str, int]) -> dict[str, int]:
        """All axis values for a workload: consts, the workload's vars, evaluated exprs."""
        values: dict[str, int] = {}
        for name, given in workload_axes.items():
            axis = self.axes.get(name)
            if axis is None and name in self.inputs:
                # Published data passes some scalar inputs to custom entrypoints this way.
                values[name] = given
                continue
            if axis is None:
                raise SpecError(f"workload sets axis {name!r}, which the definition does not declare")
            given = axes_eval.as_size(given, f"axis {name!r}")
            if axis.kind == "const" and given != axis.value:
                raise SpecError(f"workload sets const axis {name!r} to {given}, definition says {axis.value}")
            if axis.kind == "expr":
                continue  # checked against the evaluated value below
            values[name] = given
        missing = [n for n in self.var_axes() if n not in values]
        if missing:
            raise SpecError(f"workload does not set var axes {missing}")
        for name, axis in self.axes.items():
            if axis.kind == "const":
                values[name] = axis.value
        pending = [a for a in self.axes.values() if a.kind == "expr"]
        while pending:  # exprs may refer to other exprs; resolve in dependency order
            ready = [a for a in pending if axes_eval.names(a.expression) <= set(values)]
            if not ready:
                raise SpecError(f"axis expressions refer to each other in a cycle: {[a.name for a in pending]}")
            for axis in ready:
                value = axes_eval.as_size(axes_eval.evaluate(axis.expression, values), f"axis {axis.name!r}")
                if axis.name in workload_axes and axes_eval.as_size(workload_axes[axis.name], axis.name) != value:
                    raise SpecError(f"workload sets expr axis {axis.name!r} to {workload_axes[axis.name]}, "
                                    f"its expression gives {value}")
                values[axis.name] = value
                pending.remove(axis)
        for c in self.constraints:
            if axes_eval.names(c) <= set(values) and not axes_eval.evaluate(c, values):
                raise SpecError(f"constraint {c!r} does not hold for axes {workload_axes}")
        return values

    def input_shapes(self, axis_values: dict[str, int]) -> dict[str, tuple[int, ...] | None]:
        return {n: t.resolve(axis_values) for n, t in self.inputs.items()}

    def output_shapes(self, axis_values: dict[str, int]) -> dict[str, tuple[int, ...] | None]:
        return {n: t.resolve(axis_values) for n, t in self.outputs.items()}
