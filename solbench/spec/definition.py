"""Problem definitions: axes, typed inputs/outputs and a reference `run` in Python source."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from solbench.spec import axes as axes_eval
from solbench.spec import dtypes
from solbench.spec.errors import SpecError

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


@dataclass(frozen=True)
class Axis:
    name: str
    kind: str  # "const", "var" or "expr"
    value: int | None = None
    expression: str | None = None
    description: str | None = None

    @classmethod
    def from_dict(cls, name: str, data: dict) -> Axis:
        if not isinstance(data, dict):
            raise SpecError(f"axis {name!r} must be an object")
        kind = data.get("type")
        check_keys(data, {"type", "value", "expression", "description"}, f"axis {name!r}")
        if kind == "const":
            value = axes_eval.as_size(data.get("value"), f"const axis {name!r}")
            return cls(name, kind, value=value, description=data.get("description"))
        if kind == "var":
            return cls(name, kind, description=data.get("description"))
        if kind == "expr":
            expression = data.get("expression")
            axes_eval.parse(expression)
            return cls(name, kind, expression=expression, description=data.get("description"))
        raise SpecError(f"axis {name!r} has type {kind!r}; expected const, var or expr")

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"type": self.kind}
        if self.kind == "const":
            out["value"] = self.value
        if self.kind == "expr":
            out["expression"] = self.expression
        if self.description is not None:
            out["description"] = self.description
        return out


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[str, ...] | None  # None: a Python scalar; (): a 0-d tensor
    dtype: str
    description: str | None = None

    @classmethod
    def from_dict(cls, name: str, data: dict) -> TensorSpec:
        if not isinstance(data, dict):
            raise SpecError(f"tensor {name!r} must be an object")
        check_keys(data, {"shape", "dtype", "description"}, f"tensor {name!r}")
        if "dtype" not in data:
            raise SpecError(f"tensor {name!r} has no dtype")
        shape = data.get("shape")
        if shape is not None:
            if not isinstance(shape, list) or not all(isinstance(s, (str, int)) for s in shape):
                raise SpecError(f"tensor {name!r} shape must be a list of axis names or null")
            shape = tuple(str(s) for s in shape)
        try:
            dtype = dtypes.canonical(data["dtype"])
        except SpecError as exc:
            raise SpecError(f"tensor {name!r}: {exc}") from None
        return cls(shape, dtype, data.get("description"))

    def to_dict(self) -> dict:
        return {"shape": None if self.shape is None else list(self.shape), "dtype": self.dtype,
                "description": self.description}

    def resolve(self, axis_values: dict[str, int]) -> tuple[int, ...] | None:
        if self.shape is None:
            return None
        return tuple(int(s) if s.isdigit() else axis_values[s] for s in self.shape)


@dataclass(frozen=True)
class Definition:
    name: str
    axes: dict[str, Axis]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    reference: str
    op_type: str | None = None
    hf_id: str | None = None
    description: str | None = None
    constraints: tuple[str, ...] = ()
    custom_inputs_entrypoint: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_dict(cls, data: dict) -> Definition:
        if not isinstance(data, dict):
            raise SpecError("definition must be a JSON object")
        known = {"name", "op_type", "hf_id", "description", "axes", "constraints", "inputs", "outputs",
                 "reference", "custom_inputs_entrypoint"}
        extra = check_keys(data, known, "definition")
        for key in ("name", "axes", "inputs", "outputs", "reference"):
            if key not in data:
                raise SpecError(f"definition has no {key!r}")
        name = data["name"]
        if not isinstance(name, str) or not name.strip():
            raise SpecError("definition name must be a non-empty string")
        for key in ("axes", "inputs", "outputs"):
            if not isinstance(data[key], dict):
                raise SpecError(f"definition {key!r} must be an object")
        constraints = data.get("constraints") or []
        if not isinstance(constraints, list) or not all(isinstance(c, str) for c in constraints):
            raise SpecError("definition 'constraints' must be a list of expressions")
        for c in constraints:
            axes_eval.parse(c)
        definition = cls(
            name=name,
            axes={k: Axis.from_dict(k, v) for k, v in data["axes"].items()},
            inputs={k: TensorSpec.from_dict(k, v) for k, v in data["inputs"].items()},
            outputs={k: TensorSpec.from_dict(k, v) for k, v in data["outputs"].items()},
            reference=data["reference"],
            op_type=data.get("op_type"),
            hf_id=data.get("hf_id"),
            description=data.get("description"),
            constraints=tuple(constraints),
            custom_inputs_entrypoint=data.get("custom_inputs_entrypoint"),
            extra=extra,
        )
        definition._validate()
        return definition

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"name": self.name}
        for key in ("op_type", "hf_id", "description"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["axes"] = {k: a.to_dict() for k, a in self.axes.items()}
        if self.constraints:
            out["constraints"] = list(self.constraints)
        out["custom_inputs_entrypoint"] = self.custom_inputs_entrypoint
        out["inputs"] = {k: t.to_dict() for k, t in self.inputs.items()}
        out["outputs"] = {k: t.to_dict() for k, t in self.outputs.items()}
        out["reference"] = self.reference
        out.update(self.extra)
        return out

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
