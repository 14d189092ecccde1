"""The runner's entry point: a workload's concrete arguments, and destination buffers.

`make_inputs` returns the values in definition input order: tensors on `device`, Python numbers
for `shape: null` inputs. Every input gets its own private generator seeded from
`derive_seed(seed, "input", name)`; the runner passes `seed = derive_seed(run_seed, uuid, purpose,
trial)`, so both workers regenerate identical inputs and nothing depends on the global RNG.
`profile` (`profiles.py`) is part of what determines the inputs: a non-standard profile replaces
`seed` by `derive_seed(seed, "profile", profile)` before anything is drawn, and gives plain random
floating inputs row and column scales and outliers.

Sources:
* `random` (and any input the workload does not mention): a name/description heuristic
  (`heuristics.py`) or plain random values (`random_tensors.py`), drawn by `draw.py`; `shape: null` ->
  a random number.
* `scalar`: the literal. For `shape: null` it is converted to the declared kind (float dtypes ->
  float, integer dtypes -> int when integral, bool -> bool when 0/1/true/false; otherwise
  InputError). For a tensor-shaped input it is **broadcast**: a tensor of the declared shape and
  dtype filled with the value (a 0-d tensor for shape `[]`), so every argument matches its
  declaration (the published harness passed the bare number, which a kernel could not tell apart
  from a real tensor argument).
* `safetensors`: `safetensors_blobs.load_blob` (MissingDataError when absent).
* `custom`: the reference's entrypoint, called once per `make_inputs` call, only when some input is
  custom, with `axes_and_scalars` = every resolved axis (plus undeclared workload axes that
  `Definition.resolve_axes` passed through) and the workload's scalar inputs; see `custom.py` for
  the seeding. Conformance of what it returns:
  - a missing name -> InputError (blame "reference"); extra names are ignored;
  - `shape: null`: a Python number, or a one-element tensor (`.item()`, noted);
  - tensors must have the declared shape (else InputError); a different *floating* dtype is cast
    to the declared one and noted (published references sometimes build in float32 and declare
    bfloat16); any other dtype difference (int <-> float, bool, fp8/fp4 packing) is an InputError,
    because a cast would change meaning;
  - tensors are detached and moved to `device`.

`out` (the timed block's argument slot on a GPU): every tensor input is written into the given tensor
instead of a new one, with the same values as without `out` (plain random values and fillable heuristics
are drawn in place, others drawn and copied in). Only for inputs that depend on nothing but the seed
(`fillable`): random and scalar sources, no random Python numbers (a captured CUDA graph holds those).

Notes on conversions are appended to `notes` when the caller passes a list (the runner puts them
in the trace log).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from solbench.inputs import profiles
from solbench.inputs.custom import call_entrypoint
from solbench.inputs.draw import random_input, random_input_into
from solbench.inputs.errors import InputError
from solbench.inputs.safetensors_blobs import load_blob
from solbench.inputs.seeds import derive_seed
from solbench.spec import dtypes
from solbench.spec.definition import Definition, TensorSpec
from solbench.spec.workload import Workload

FILLS = ("nan", "alt", "zeros", "empty")


def make_inputs(definition: Definition, workload: Workload, axis_values: dict[str, int], *, seed: int,
                device: torch.device | str, data_roots: Sequence[Path] = (),
                custom_entrypoint: Callable | None = None, notes: list[str] | None = None,
                profile: str = profiles.STANDARD, out: Sequence | None = None) -> list:
    """The arguments for `definition.reference`'s `run`, in input order, for one trial (written into
    `out`'s tensors when given; see the module docstring)."""
    device = torch.device(device)
    if out is not None and not fillable(definition, workload):
        raise InputError("inputs other than random and scalar ones cannot be drawn into given tensors")
    if profiles.check_profile(profile) != profiles.STANDARD:
        seed = derive_seed(seed, "profile", profile)
    notes = notes if notes is not None else []
    try:
        shapes = definition.input_shapes(axis_values)
    except KeyError as exc:
        raise InputError(f"axis {exc.args[0]!r} has no value; pass Definition.resolve_axes(workload.axes)") from None
    sources = {name: workload.source_of(name) for name in definition.inputs}

    custom: dict[str, Any] = {}
    wanted = [name for name, src in sources.items() if src.kind == "custom"]
    if wanted:
        if custom_entrypoint is None:
            raise InputError(f"inputs {wanted} are custom but no custom_inputs_entrypoint was given")
        axes_and_scalars = {**axis_values, **workload.scalar_values()}
        custom = call_entrypoint(custom_entrypoint, axes_and_scalars, device, derive_seed(seed, "custom"))
        missing = [n for n in wanted if n not in custom]
        if missing:
            raise InputError(f"custom inputs entrypoint did not return {missing} (it returned {sorted(custom)})",
                             blame="reference")

    values = []
    for index, (name, spec) in enumerate(definition.inputs.items()):
        src, shape = sources[name], shapes[name]
        target = out[index] if out is not None and shape is not None else None
        if target is not None:
            if not (isinstance(target, torch.Tensor) and tuple(target.shape) == tuple(shape)
                    and target.dtype == dtypes.torch_dtype(spec.dtype)):
                raise InputError(f"input {name!r}: the given tensor is not of shape {tuple(shape)} and dtype {spec.dtype}")
            if src.kind == "scalar":
                _fill_scalar(target, name, src.value, spec)
            else:
                random_input_into(target, name, spec, device, definition.op_type, seed, profile)
            values.append(target)
            continue
        if src.kind == "custom":
            value = _conform_custom(name, custom[name], spec, shape, device, notes)
        elif src.kind == "scalar":
            value = _scalar(name, src.value, spec, shape, device)
        elif src.kind == "safetensors":
            if shape is None:
                raise InputError(f"input {name!r} is a Python scalar (shape null) but comes from safetensors")
            value = load_blob(src.path, src.tensor_key, data_roots, shape, spec.dtype, device, name)
        else:
            value = random_input(name, spec, shape, device, definition.op_type, seed, profile)
        _validate(name, value, spec, shape)
        values.append(value)
    return values


def fillable(definition: Definition, workload: Workload) -> bool:
    """Whether `make_inputs(out=...)` can serve this workload: every input random or a literal, and no
    random Python number (it would differ per seed, and a slot or a captured graph holds one value)."""
    for name, spec in definition.inputs.items():
        kind = workload.source_of(name).kind
        if kind not in ("random", "scalar") or (kind == "random" and spec.shape is None):
            return False
    return True


def _fill_scalar(out: torch.Tensor, name: str, value: Any, spec: TensorSpec) -> None:
    """`_scalar`'s broadcast tensor, written into `out` (a call may have written into its inputs)."""
    if spec.dtype == "float4_e2m1fn_x2":
        raise InputError(f"input {name!r}: a scalar cannot fill a packed fp4 tensor")
    out.fill_(python_number(name, value, spec.dtype))


def python_number(name: str, value: Any, dtype_name: str) -> int | float | bool:
    """A number converted to the Python kind of `dtype_name`; InputError when it does not fit."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise InputError(f"input {name!r} is a scalar (shape null) but got a tensor of shape {tuple(value.shape)}")
        value = value.float().item() if value.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else value.item()
    if not isinstance(value, numbers.Number) or isinstance(value, complex):
        raise InputError(f"input {name!r} is a scalar (shape null) but got {type(value).__name__}")
    kind = dtypes.canonical(dtype_name)
    if dtypes.is_floating(kind):
        return float(value)
    if kind == "bool":
        if value not in (0, 1):
            raise InputError(f"input {name!r} is bool but got {value!r}")
        return bool(value)
    if not math.isfinite(float(value)) or float(value) != int(value):
        raise InputError(f"input {name!r} is {kind} but got non-integral {value!r}")
    return int(value)


def _scalar(name: str, value: Any, spec: TensorSpec, shape: tuple[int, ...] | None, device: torch.device):
    number = python_number(name, value, spec.dtype)
    if shape is None:
        return number
    if spec.dtype == "float4_e2m1fn_x2":
        raise InputError(f"input {name!r}: a scalar cannot fill a packed fp4 tensor")
    return torch.full(shape, number, dtype=dtypes.torch_dtype(spec.dtype), device=device)


def _conform_custom(name: str, value: Any, spec: TensorSpec, shape: tuple[int, ...] | None,
                    device: torch.device, notes: list[str]):
    if shape is None:
        if isinstance(value, torch.Tensor):
            notes.append(f"custom input {name!r}: one-element tensor converted to a Python number")
        try:
            return python_number(name, value, spec.dtype)
        except InputError as exc:
            raise InputError(str(exc), blame="reference") from None
    if not isinstance(value, torch.Tensor):
        if shape == () and isinstance(value, numbers.Number):
            notes.append(f"custom input {name!r}: Python number made a 0-d tensor")
            value = torch.tensor(value)
        else:
            raise InputError(f"custom input {name!r} must be a tensor of shape {shape}, got "
                             f"{type(value).__name__}", blame="reference")
    if tuple(value.shape) != tuple(shape):
        raise InputError(f"custom input {name!r} has shape {tuple(value.shape)}, the definition resolves "
                         f"it to {tuple(shape)}", blame="reference")
    expected = dtypes.torch_dtype(spec.dtype)
    value = value.detach()
    if value.dtype != expected:
        castable = (value.dtype.is_floating_point and expected.is_floating_point
                    and not dtypes.is_low_precision_float(spec.dtype)
                    and value.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2))
        if value.dtype == torch.bool and expected == torch.bool:
            castable = True
        if not castable:
            raise InputError(f"custom input {name!r} has dtype {value.dtype}, the definition declares "
                             f"{spec.dtype}", blame="reference")
        notes.append(f"custom input {name!r}: cast from {value.dtype} to declared {spec.dtype}")
        value = value.to(expected)
    if value.device != device:
        value = value.to(device)
    return value


def _validate(name: str, value: Any, spec: TensorSpec, shape: tuple[int, ...] | None) -> None:
    """Last line of defence: whatever the source, the value matches its declaration."""
    if shape is None:
        if isinstance(value, torch.Tensor) or not isinstance(value, (int, float, bool)):
            raise InputError(f"input {name!r} should be a Python number, got {type(value).__name__}")
        return
    if type(value) is not torch.Tensor:
        raise InputError(f"input {name!r} should be a torch.Tensor, got {type(value).__name__}")
    if tuple(value.shape) != tuple(shape):
        raise InputError(f"input {name!r} has shape {tuple(value.shape)}, expected {tuple(shape)}")
    if value.dtype != dtypes.torch_dtype(spec.dtype):
        raise InputError(f"input {name!r} has dtype {value.dtype}, expected {spec.dtype}")


# -- destination buffers ----------------------------------------------------------------------

def fill_value(dtype_name: str, fill: str) -> float | int | bool | None:
    """The poison for one dtype. `nan`: NaN for floats (any NaN fails the comparison), the most
    negative value for signed ints, 255 for uint8, True for bool, and for fp4 (which has no NaN)
    the byte 0x77 (+6, +6). `alt`: a second, different poison (NaN, the largest int, 0, False,
    0xFF = (-6, -6)). Integers, bools and fp4 cannot be poisoned by a value no kernel could write,
    so the runner runs DPS solutions once per fill and an element must be right under both; see
    `needs_second_fill`. `zeros`: the published behaviour. Returns None for `empty`."""
    if fill not in FILLS:
        raise ValueError(f"fill must be one of {FILLS}, got {fill!r}")
    if fill == "empty":
        return None
    if fill == "zeros":
        return 0
    name = dtypes.canonical(dtype_name)
    primary = fill == "nan"
    if name == "float4_e2m1fn_x2":
        return 0x77 if primary else 0xFF
    if dtypes.is_floating(name):
        return float("nan")
    if name == "bool":
        return primary
    info = torch.iinfo(dtypes.torch_dtype(name))
    if name == "uint8":
        return info.max if primary else info.min
    return info.min if primary else info.max


def needs_second_fill(definition: Definition) -> bool:
    """True when some output (int, bool, fp4) cannot be fully poisoned by one fill."""
    return any(not dtypes.is_floating(t.dtype) or t.dtype == "float4_e2m1fn_x2" for t in definition.outputs.values())


def allocate_outputs(definition: Definition, axis_values: dict[str, int], device: torch.device | str,
                     fill: str = "nan") -> list[torch.Tensor]:
    """Output buffers for destination-passing-style calls, in output order, pre-filled with poison
    so an element the kernel never writes fails the comparison (the published harness zeroed them,
    so a kernel could skip writing zeros)."""
    device = torch.device(device)
    buffers = []
    for name, shape in definition.output_shapes(axis_values).items():
        spec = definition.outputs[name]
        if shape is None:
            raise InputError(f"output {name!r} is a Python scalar (shape null); it cannot be passed "
                             f"destination-style (use a value-returning solution)")
        value = fill_value(spec.dtype, fill)
        dtype = dtypes.torch_dtype(spec.dtype)
        if spec.dtype == "float4_e2m1fn_x2":
            raw = torch.empty(shape, dtype=torch.uint8, device=device)
            if value is not None:
                raw.fill_(value)
            buffers.append(raw.view(dtype))
        elif value is None:
            buffers.append(torch.empty(shape, dtype=dtype, device=device))
        else:
            buffers.append(torch.full(shape, value, dtype=dtype, device=device))
    return buffers
