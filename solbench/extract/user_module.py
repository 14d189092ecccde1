"""`--module package.module:Class`: any importable nn.Module, built on meta, as a BuiltModel.

Beyond the hub: a model the user has installed, remote code kept locally, their own research model. The
constructor's arguments come from `--config FILE` (a JSON object) and/or `--config-kw key=value`; a
transformers-style class (one with a `config_class`) gets a config object built from them. The call is
described by `--input` specs, one per forward argument:

    NAME=DIM,DIM,...[:DTYPE]     DIM = 1024 (fixed) | AXIS:SIZE|SIZE|... (variable, sizes to capture at)
    DTYPE = float32 | bfloat16 | float16 | int64[HIGH] | int32[HIGH] | bool    (no DTYPE: the capture dtype)

e.g. `--input x=2,seq:64|96|160,1024` or `--input ids=2,seq:64|96|160:int64[32000]`. A variable axis needs
three or more distinct sizes >= 2 (so capture never specialises on 0 or 1): the block is captured at the
first and checked bit-exact at the others, and the sizes double as the workload sizes. Integer inputs hold values in [0, HIGH). The call's tensors are made on the current
default device (`with torch.device(...)`), so the capture decides where they live.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from solbench.extract import configs
from solbench.extract.built import BuiltModel
from solbench.spec.errors import SpecError

FLOAT_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
                "float16": torch.float16, "fp16": torch.float16}
INT_DTYPES = {"int64": torch.int64, "int32": torch.int32}
_AXIS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_INT_DTYPE = re.compile(r"(int64|int32)\[(\d+)\]$")


@dataclass(frozen=True)
class InputSpec:
    """One forward argument: its dims (int = fixed, str = a variable axis) and dtype (None = the call's)."""

    name: str
    dims: tuple[int | str, ...]
    dtype: torch.dtype | None = None
    high: int = 0  # integer inputs: values in [0, high)

    def tensor(self, axes: dict[str, int], call_dtype: torch.dtype) -> torch.Tensor:
        shape = tuple(axes[d] if isinstance(d, str) else d for d in self.dims)
        if self.dtype is torch.bool:
            return torch.randint(0, 2, shape).bool()
        if self.dtype in INT_DTYPES.values():
            return torch.randint(0, self.high, shape, dtype=self.dtype)
        return torch.randn(shape, dtype=self.dtype or call_dtype)


def parse_input(text: str) -> tuple[InputSpec, dict[str, tuple[int, ...]]]:
    """`x=2,seq:64|96|160,1024:float32` -> the spec and its variable axes' sizes ({"seq": (64, 96, 160)})."""
    name, eq, rest = text.partition("=")
    if not eq or not name.isidentifier() or not rest:
        raise SpecError(f"--input {text!r}: expected NAME=DIM,DIM,...[:DTYPE], e.g. x=2,seq:64|96|160,1024")
    dtype, high = None, 0
    head, colon, tail = rest.rpartition(":")
    if colon and (tail in FLOAT_DTYPES or tail == "bool" or _INT_DTYPE.match(tail)):
        rest = head
        if tail in FLOAT_DTYPES:
            dtype = FLOAT_DTYPES[tail]
        elif tail == "bool":
            dtype = torch.bool
        else:
            match = _INT_DTYPE.match(tail)
            dtype, high = INT_DTYPES[match.group(1)], int(match.group(2))
            if high < 1:
                raise SpecError(f"--input {text!r}: an integer input needs HIGH >= 1 in {tail}")
    elif colon and "," not in tail and not re.fullmatch(r"[\d|]+", tail):
        raise SpecError(f"--input {text!r}: unknown dtype {tail!r}; use one of "
                        f"{', '.join(sorted(FLOAT_DTYPES))}, int64[HIGH], int32[HIGH], bool")
    dims: list[int | str] = []
    axes: dict[str, tuple[int, ...]] = {}
    for part in rest.split(","):
        dims.append(_parse_dim(text, part.strip(), axes))
    return InputSpec(name, tuple(dims), dtype, high), axes


def _parse_dim(text: str, part: str, axes: dict[str, tuple[int, ...]]) -> int | str:
    if part.isdigit() and int(part) > 0:
        return int(part)
    axis, colon, sizes = part.partition(":")
    if not colon or not _AXIS.match(axis):
        raise SpecError(f"--input {text!r}: dim {part!r} is neither a size (1024) nor AXIS:SIZE|SIZE|SIZE "
                        f"(seq:64|96|160)")
    try:
        values = tuple(int(s) for s in sizes.split("|"))
    except ValueError:
        raise SpecError(f"--input {text!r}: the sizes of axis {axis!r} must be integers, as in {axis}:64|96|160") from None
    if len(values) < 3 or min(values) < 2 or len(set(values)) != len(values):
        raise SpecError(f"--input {text!r}: axis {axis!r} needs three or more distinct sizes >= 2, captured at the "
                        f"first and checked at the others (e.g. {axis}:64|96|160)")
    axes[axis] = values
    return axis


def parse_config_kw(items: list[str]) -> dict[str, Any]:
    """`key=value` pairs; a value that reads as JSON (64, 1e-6, true, [1,2]) is that value, else a string."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.isidentifier():
            raise SpecError(f"--config-kw {item!r}: expected KEY=VALUE, e.g. hidden_size=1024")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def read_config_file(path: str | Path) -> dict[str, Any]:
    return configs.read_json_object(path, "the constructor's arguments")


def import_module_class(target: str) -> type[nn.Module]:
    """`package.module:Class` -> the class, which must be an nn.Module subclass."""
    module_name, colon, attr = target.partition(":")
    if not colon or not module_name or not attr:
        raise SpecError(f"--module {target!r}: expected package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"--module {target!r}: cannot import {module_name!r}: {exc}") from None
    cls: Any = module
    for part in attr.split("."):
        cls = getattr(cls, part, None)
        if cls is None:
            raise SpecError(f"--module {target!r}: {module_name} has no {attr!r}")
    if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
        raise SpecError(f"--module {target!r}: {attr} is not an nn.Module subclass")
    return cls


def build_user_module(target: str, config: dict[str, Any], inputs: list[str],
                      model_id: str | None = None) -> BuiltModel:
    """Build `target` on the meta device with `config` and describe its call by `inputs`."""
    cls = import_module_class(target)
    if not inputs:
        raise SpecError("--module needs one --input per forward argument, e.g. --input x=2,seq:64|96|160,1024")
    specs: list[InputSpec] = []
    capture: dict[str, tuple[int, ...]] = {}
    for text in inputs:
        spec, axes = parse_input(text)
        for axis, sizes in axes.items():
            if capture.get(axis, sizes) != sizes:
                raise SpecError(f"--input: axis {axis!r} is given two different size lists")
            capture[axis] = sizes
        specs.append(spec)
    module = _construct(cls, target, config)
    by_name = _binds_by_name(module, [s.name for s in specs])

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        tensors = [s.tensor(axes, dtype) for s in specs]
        if by_name:
            return (), {s.name: t for s, t in zip(specs, tensors)}
        return tuple(tensors), {}

    return BuiltModel(model_id or target, module.eval(), "module", make_call, capture, dict(capture),
                      _versions(cls))


def _construct(cls: type[nn.Module], target: str, config: dict[str, Any]) -> nn.Module:
    config_class = getattr(cls, "config_class", None)
    try:
        with torch.device("meta"):
            if inspect.isclass(config_class):  # a transformers-style model takes one config object
                return cls(config_class(**config))
            return cls(**config)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecError(f"--module {target!r}: cannot build it from the given config: {first}") from None


def _binds_by_name(module: nn.Module, names: list[str]) -> bool:
    """Pass inputs by keyword when forward names them all; else positionally, in the order given."""
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False
    return all(n in params for n in names)


def _versions(cls: type) -> dict[str, str]:
    versions = {"torch": torch.__version__}
    package = cls.__module__.split(".")[0]
    try:
        versions[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        pass
    return versions
