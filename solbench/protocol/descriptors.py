"""CUDA IPC descriptors: the small records that stand for a large GPU output between the two workers.

A descriptor names an allocation the solution's worker exported (`cuIpcGetMemHandle`), where the output
lies in it, and what it is (dtype, shape, device). It crosses two process boundaries (solution worker ->
orchestrator -> reference worker) and is checked on each side by `check_descriptor`: every field is data
from the solution's process. How the bytes then move is `solbench.worker.transfer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from solbench.spec import dtypes
from solbench.spec.errors import SpecError

IPC_KEY = "__cuda_ipc__"
RECEIVED_KEY = "__received__"
HANDLE_BYTES = 64
MAX_EXPORTS_PER_MESSAGE = 64
MAX_DIMS = 64
_DESCRIPTOR_KEYS = frozenset({IPC_KEY, "handle", "offset", "nbytes", "dtype", "shape", "device"})


class TransferRefused(Exception):
    """A descriptor the harness never writes: malformed, inconsistent, or outside its allocation."""


# -- descriptors (plain data; checked in the orchestrator and again in the reference worker) --------

@dataclass(frozen=True)
class Descriptor:
    token: int
    handle: bytes
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    device: str


def is_descriptor(value: Any) -> bool:
    return type(value) is dict and IPC_KEY in value


def is_received(value: Any) -> bool:
    return type(value) is dict and RECEIVED_KEY in value


def check_descriptor(value: Any, expected: tuple[str, tuple[int, ...] | None] | None = None) -> Descriptor:
    """The descriptor's fields, or TransferRefused. `expected`: the (dtype, shape) the definition
    declares for that output position, when known."""
    if type(value) is not dict or set(value) != _DESCRIPTOR_KEYS:
        raise TransferRefused(f"an IPC descriptor has the fields {sorted(map(str, value)) if type(value) is dict else type(value).__name__}")
    token, handle, offset, nbytes = value[IPC_KEY], value["handle"], value["offset"], value["nbytes"]
    dtype, shape, device = value["dtype"], value["shape"], value["device"]
    if type(token) is not int or not 0 <= token < 2**62:
        raise TransferRefused(f"export id {token!r}")
    if type(handle) is not str or len(handle) != 2 * HANDLE_BYTES:
        raise TransferRefused("the IPC handle is not 64 bytes of hex")
    try:
        raw = bytes.fromhex(handle)
    except ValueError:
        raise TransferRefused("the IPC handle is not 64 bytes of hex") from None
    if type(offset) is not int or not 0 <= offset < 2**50:
        raise TransferRefused(f"offset {offset!r}")
    if type(shape) is not list or len(shape) > MAX_DIMS or not all(type(s) is int and 0 <= s < 2**50 for s in shape):
        raise TransferRefused(f"shape {shape!r}")
    if type(dtype) is not str or type(device) is not str or len(device) > 200:
        raise TransferRefused("dtype or device is not a short string")
    try:
        dtype = dtypes.canonical(dtype)
    except SpecError:
        raise TransferRefused(f"unknown dtype {dtype!r}") from None
    numel = 1
    for size in shape:
        numel *= size
    if type(nbytes) is not int or nbytes <= 0 or nbytes != numel * dtypes.storage_bits(dtype) // 8:
        raise TransferRefused(f"{nbytes!r} bytes for shape {shape} and dtype {dtype}")
    if expected is not None:
        want_dtype, want_shape = expected
        if want_shape is None or dtypes.canonical(want_dtype) != dtype or tuple(want_shape) != tuple(shape):
            raise TransferRefused(f"a {dtype} tensor of shape {tuple(shape)} where the definition declares "
                                  f"{'a Python scalar' if want_shape is None else f'{want_dtype} {tuple(want_shape)}'}")
    return Descriptor(token, raw, offset, nbytes, dtype, tuple(shape), device)


def check_descriptors(values: Any) -> list[Descriptor]:
    """Every descriptor of one transfer, or TransferRefused (also for a repeated export id)."""
    if type(values) is not list or not 0 < len(values) <= MAX_EXPORTS_PER_MESSAGE:
        raise TransferRefused("exports is not a short non-empty list")
    found = [check_descriptor(v) for v in values]
    if len({d.token for d in found}) != len(found):
        raise TransferRefused("an export id appears twice")
    return found
