"""The formats as declarative typed models on pydantic v2 dataclasses: one way to load, dump and report.

Each format is a pydantic dataclass (positional construction, `dataclasses.replace` and equality keep
working); its fields and their types are the format. `FormatModel` gives every one the same `from_dict`
(validate, a bad field raised as a one-line `SpecError` naming it) and `to_dict` (the JSON-ready form),
so no format writes its own pair. docs/formats/README.md says why pydantic and what it costs.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Annotated, Any, Self

from pydantic import ConfigDict, PlainSerializer, TypeAdapter, ValidationError

from solbench.spec.errors import SpecError

# The trace models ignore keys they do not know (other tools' additions).
LENIENT = ConfigDict(extra="ignore")
# The input formats: frozen; unknown keys are refused (or kept as metadata) before, by `check_keys`.
FORMAT = ConfigDict(frozen=True, extra="ignore", serialize_by_alias=True)


def absent(value: Any) -> bool:
    """Fields left out of the written form where unset (`Field(exclude_if=absent)`)."""
    return value is None


def finite_or_none(value: float | None) -> float | None:
    """Strict JSON has no NaN/Inf: they are written as null."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


# A float written as null where it is NaN or infinite (an error of a broken kernel, a speedup over zero).
FiniteFloat = Annotated[float | None, PlainSerializer(finite_or_none)]


@cache
def adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


# pydantic's error types in the words the formats' messages use
_PHRASES = {
    "missing": "is missing", "dict_type": "must be an object", "dataclass_type": "must be an object",
    "model_type": "must be an object", "list_type": "must be a list", "string_type": "must be a string",
    "int_type": "must be an integer", "int_from_float": "must be an integer", "int_parsing": "must be an integer",
    "float_parsing": "must be a number", "bool_parsing": "must be true or false", "bool_type": "must be true or false",
    "float_type": "must be a number", "finite_number": "must be a finite number",
    "string_too_short": "must not be empty", "literal_error": "must be one of {expected}",
    "greater_than_equal": "must be at least {ge}", "less_than_equal": "must be at most {le}",
    "enum": "must be one of {expected}", "json_invalid": "not valid JSON ({error})",
}


# the names pydantic gives a union's members in an error's location: not fields
_UNION_TAGS = frozenset({"int", "float", "bool", "str", "none", "list", "dict", "tuple"})


def describe(error: ValidationError) -> str:
    """A validation error in one line: the first failing field's path, what is wrong and what was given
    (for a field of several types, what each would have needed: `must be an integer or a number`)."""
    errors = error.errors(include_url=False)
    where = _field_path(errors[0]["loc"])
    alike = [e for e in errors if _field_path(e["loc"]) == where and e["type"] in _PHRASES]
    if errors[0]["type"] not in _PHRASES or errors[0]["type"] in ("missing", "json_invalid"):
        message = _phrase(errors[0])
    else:
        phrases = list(dict.fromkeys(_phrase(e) for e in alike))
        message = " or ".join([phrases[0]] + [p.removeprefix("must be ") for p in phrases[1:]])
        message += f", got {_shown(errors[0]['input'])}"
    return f"{where}: {message}" if where else message


def _field_path(loc: tuple) -> str:
    return ".".join(str(part) for part in loc if part not in _UNION_TAGS and "[" not in str(part))


def _phrase(error: Any) -> str:
    phrase = _PHRASES.get(error["type"])
    if phrase is None:
        return error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return phrase.format(**error.get("ctx", {}))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validate(cls: type, data: Any, *, label: str | None = None, context: dict | None = None) -> Any:
    """`data` (decoded JSON) as a `cls`, or a one-line SpecError naming the field (after `label`, which
    names the object); the caller adds the file and line (`SpecError.located`)."""
    try:
        return adapter(cls).validate_python(data, context=context)
    except ValidationError as exc:
        message = describe(exc)
        raise SpecError(f"{label}: {message}" if label and not message.startswith(label) else message) from None


def dump(value: Any) -> Any:
    """The JSON-ready form of a model (or a list/dict of them)."""
    return adapter(type(value)).dump_python(value, mode="json")


class FormatModel:
    """What every format model shares: its dict form in and out, through its declared fields."""

    @classmethod
    def from_dict(cls, data: Any, **context: Any) -> Self:
        """`data` as this model; `context` reaches its validators (a solution's `base_dir`)."""
        return validate(cls, data, label=cls.label(data), context=context)

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        """One JSON document as this model, parsed and validated in one pass (a trace file's line)."""
        try:
            return adapter(cls).validate_json(text)
        except ValidationError as exc:
            raise SpecError(describe(exc)) from None

    @classmethod
    def label(cls, data: Any) -> str | None:
        """How an error names the object it is in (a workload by its uuid); None: by field alone."""
        return None

    def to_dict(self) -> dict[str, Any]:
        return dump(self)
