"""Data type names used in definitions, and their storage widths.

Widths are per *stored* element: `float4_e2m1fn_x2` packs two fp4 values into one byte, so its
storage width is 8 bits and a tensor declared with last dim K holds 2*K fp4 values.
"""

from __future__ import annotations

from solbench.spec.errors import SpecError

# name -> (bits per stored element, kind); kind is "float", "int", "uint" or "bool".
_DTYPES: dict[str, tuple[int, str]] = {
    "float64": (64, "float"),
    "float32": (32, "float"),
    "float16": (16, "float"),
    "bfloat16": (16, "float"),
    "float8_e4m3fn": (8, "float"),
    "float8_e5m2": (8, "float"),
    "float4_e2m1fn_x2": (8, "float"),
    "int64": (64, "int"),
    "int32": (32, "int"),
    "int16": (16, "int"),
    "int8": (8, "int"),
    "uint8": (8, "uint"),
    "bool": (8, "bool"),
}
# Spellings seen in published data that mean one of the names above.
_ALIASES = {"float4_e2m1": "float4_e2m1fn_x2"}

DTYPE_NAMES: tuple[str, ...] = tuple(_DTYPES)


def canonical(name: str) -> str:
    """The canonical dtype name, or SpecError for an unknown one."""
    name = _ALIASES.get(name, name)
    if name not in _DTYPES:
        raise SpecError(f"unknown dtype {name!r}; known: {', '.join(DTYPE_NAMES)}")
    return name


def storage_bits(name: str) -> int:
    return _DTYPES[canonical(name)][0]


def is_floating(name: str) -> bool:
    return _DTYPES[canonical(name)][1] == "float"


def is_integer_like(name: str) -> bool:
    """Integers and bools: compared exactly, never with float tolerances."""
    return _DTYPES[canonical(name)][1] in ("int", "uint", "bool")


def is_low_precision_float(name: str) -> bool:
    """fp8 / fp4: generated and compared through float32."""
    return canonical(name).startswith(("float8", "float4"))


def torch_dtype(name: str):
    """The torch dtype for a name (imports torch lazily so spec loading stays light)."""
    import torch

    name = canonical(name)
    dtype = getattr(torch, name, None)
    if dtype is None:
        raise SpecError(f"dtype {name!r} is not supported by torch {torch.__version__}")
    return dtype


def name_of(dtype) -> str:
    """The definition name of a torch dtype (inverse of torch_dtype)."""
    text = str(dtype).removeprefix("torch.")
    return canonical(text)
