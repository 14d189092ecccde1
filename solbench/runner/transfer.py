"""Large GPU outputs from the solution's worker to the reference worker by CUDA IPC.

Sending a multi-GB output as bytes costs a device-to-host copy, two socket hops through the
orchestrator and a host-to-device copy, for every trial and every sampled timed call. When both
workers use the same GPU, an output of at least `ipc_min_bytes` (a field the orchestrator puts in
the solution's `call`/`time` requests, and only there) travels as a handle instead:

1. The solution's worker makes a contiguous device copy of the output (a trial's outputs always; the
   timed block's sampled outputs are already the harness's own copies), exports the allocation
   holding it (`cuIpcGetMemHandle`) and sends a small descriptor: export id, handle, byte offset in
   the allocation, byte count, dtype, shape, and the device's identity. It keeps the copy alive.
2. The orchestrator checks each descriptor against the definition (dtype, shape, byte count) and
   forwards it in a `receive` request to the reference worker.
3. The reference worker checks it again, opens the handle (`cuIpcOpenMemHandle`), asks the driver
   how large the mapped allocation is (`cuMemGetAddressRange`), refuses an offset and byte count
   outside it, copies the bytes into its own fresh memory, synchronises, closes the handle and
   acknowledges. `judge` then uses that copy.
4. The orchestrator sends `release` to the solution's worker, which drops its copy.

The reference worker only ever opens handles; it never exports anything, so nothing of its memory
(reference outputs included) is reachable from the solution's process. Malformed descriptors, and
ranges beyond the exported allocation, are forgeries (REWARD_HACK): the harness never writes them.
Anything that makes IPC merely unavailable (no libcuda, another device, a handle the driver will
not open, `expandable_segments` allocations that cannot be exported) falls back to bytes: the
orchestrator `fetch`es the exports from the solution's worker as ordinary tensors.

Calls into the CUDA driver go through ctypes. The library and its functions are bound before the
audit hook is installed (`bind_driver`): loading them is not the solution's doing, and calls through
bound function pointers raise no audit events.
"""

from __future__ import annotations

import contextlib
import itertools
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
_NEXT_EXPORT = itertools.count(1)


class TransferRefused(Exception):
    """A descriptor the harness never writes: malformed, inconsistent, or outside its allocation."""


class TransferUnavailable(Exception):
    """CUDA IPC cannot carry this transfer here (bytes must)."""


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


# -- the CUDA driver -----------------------------------------------------------------------------------

class CudaDriver:
    """The few driver entry points IPC needs (libcuda through ctypes)."""

    def __init__(self) -> None:
        import ctypes

        self.ctypes = ctypes
        lib = ctypes.CDLL("libcuda.so.1")

        class IpcHandle(ctypes.Structure):
            _fields_ = [("reserved", ctypes.c_ubyte * HANDLE_BYTES)]

        def bind(names: tuple[str, ...], argtypes: list):
            for name in names:
                function = getattr(lib, name, None)
                if function is not None:
                    function.argtypes, function.restype = argtypes, ctypes.c_int
                    return function
            raise OSError(f"libcuda has none of {names}")

        u64, size_t = ctypes.c_uint64, ctypes.c_size_t
        self.IpcHandle = IpcHandle
        self._get_handle = bind(("cuIpcGetMemHandle",), [ctypes.POINTER(IpcHandle), u64])
        self._open = bind(("cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"), [ctypes.POINTER(u64), IpcHandle, ctypes.c_uint])
        self._close = bind(("cuIpcCloseMemHandle",), [u64])
        self._range = bind(("cuMemGetAddressRange_v2", "cuMemGetAddressRange"),
                           [ctypes.POINTER(u64), ctypes.POINTER(size_t), u64])
        self._copy = bind(("cuMemcpyDtoD_v2", "cuMemcpyDtoD"), [u64, u64, size_t])
        self._synchronize = bind(("cuCtxSynchronize",), [])
        self._current = bind(("cuCtxGetCurrent",), [ctypes.POINTER(ctypes.c_void_p)])
        self._error_name = bind(("cuGetErrorName",), [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)])

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            name = self.ctypes.c_char_p()
            label = name.value.decode() if self._error_name(code, self.ctypes.byref(name)) == 0 and name.value else "?"
            raise TransferUnavailable(f"{what} failed: CUDA error {code} ({label})")

    def require_context(self) -> None:
        context = self.ctypes.c_void_p()
        self._check(self._current(self.ctypes.byref(context)), "cuCtxGetCurrent")
        if not context.value:
            raise TransferUnavailable("no current CUDA context")

    def allocation(self, pointer: int) -> tuple[int, int]:
        """(base, size) of the allocation holding `pointer`."""
        base, size = self.ctypes.c_uint64(), self.ctypes.c_size_t()
        self._check(self._range(self.ctypes.byref(base), self.ctypes.byref(size), pointer), "cuMemGetAddressRange")
        return base.value, size.value

    def export(self, pointer: int) -> tuple[bytes, int]:
        """(handle of the allocation holding `pointer`, offset of `pointer` in it)."""
        base, _ = self.allocation(pointer)
        handle = self.IpcHandle()
        self._check(self._get_handle(self.ctypes.byref(handle), base), "cuIpcGetMemHandle")
        return bytes(handle.reserved), pointer - base

    def open(self, handle: bytes) -> int:
        pointer = self.ctypes.c_uint64()
        raw = self.IpcHandle((self.ctypes.c_ubyte * HANDLE_BYTES)(*handle))
        self._check(self._open(self.ctypes.byref(pointer), raw, 1), "cuIpcOpenMemHandle")  # 1: lazy peer access
        return pointer.value

    def close(self, pointer: int) -> None:
        self._close(pointer)

    def copy(self, destination: int, source: int, count: int) -> None:
        self._check(self._copy(destination, source, count), "cuMemcpyDtoD")

    def synchronize(self) -> None:
        self._check(self._synchronize(), "cuCtxSynchronize")


def bind_driver(state) -> None:
    """Bind libcuda for a CUDA worker (before the audit hook: loading a library is not the solution's
    doing). Leaves `state.cuda_driver` None, and the reason in `state.ipc_unavailable`, when it fails."""
    state.cuda_driver, state.ipc_unavailable = None, None
    state.exports, state.received = {}, {}
    if not state.is_cuda:
        state.ipc_unavailable = "not a CUDA worker"
        return
    try:
        state.cuda_driver = CudaDriver()
    except (OSError, AttributeError, TypeError) as exc:
        state.ipc_unavailable = f"libcuda could not be bound: {exc}"


def device_identity(state) -> str:
    """The GPU this worker uses, as both workers of a device must see it alike (its UUID where torch
    reports one)."""
    props = state.torch.cuda.get_device_properties(0)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        raw = getattr(uuid, "bytes", None)
        return "uuid:" + (bytes(raw).hex() if raw is not None else str(uuid))[:180]
    pci = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
    return f"name:{props.name} pci:{pci}"[:200]


# -- the solution's worker: export, fetch, release ---------------------------------------------------

def release_all(state) -> None:
    """Drop every export (a new call or timed block starts: the orchestrator is done with the last ones)."""
    exports = getattr(state, "exports", None)
    if exports:
        exports.clear()


def export_outputs(state, outputs: list, min_bytes: Any, *, copy: bool) -> list:
    """`outputs` with each CUDA tensor of at least `min_bytes` replaced by an IPC descriptor.

    `copy`: export a fresh contiguous copy (a trial's outputs are the solution's own tensors) rather
    than the tensor itself (the timed block's sampled outputs are already the harness's copies). A
    tensor that cannot be exported stays a tensor and travels as bytes.
    """
    torch = state.torch
    if type(min_bytes) is not int or min_bytes <= 0 or getattr(state, "cuda_driver", None) is None:
        return outputs
    result = []
    for value in outputs:
        if (type(value) is torch.Tensor and value.is_cuda and value.numel() > 0
                and value.numel() * value.element_size() >= min_bytes):
            descriptor = _export_one(state, value, copy)
            result.append(value if descriptor is None else descriptor)
        else:
            result.append(value)
    return result


def _export_one(state, value, copy: bool) -> dict | None:
    torch = state.torch
    try:
        buffer = value.detach()
        if copy or not buffer.is_contiguous():
            buffer = buffer.clone(memory_format=torch.contiguous_format)
        torch.cuda.synchronize()
        state.cuda_driver.require_context()
        handle, offset = state.cuda_driver.export(buffer.data_ptr())
        identity = device_identity(state)
    except (TransferUnavailable, torch.cuda.OutOfMemoryError, RuntimeError) as exc:
        state.ipc_unavailable = f"export failed: {exc}"[:300]
        return None
    token = next(_NEXT_EXPORT)
    state.exports[token] = buffer
    return {IPC_KEY: token, "handle": handle.hex(), "offset": offset, "nbytes": buffer.numel() * buffer.element_size(),
            "dtype": dtypes.name_of(buffer.dtype), "shape": list(buffer.shape), "device": identity}


def handle_release(state, message: dict) -> dict:
    """Drop the named exports (the reference worker has its copies, or the transfer was abandoned)."""
    exports = getattr(state, "exports", {})
    tokens = message.get("exports")
    for token in tokens if type(tokens) is list else []:
        if type(token) is int:
            exports.pop(token, None)
    return {"ok": True, "held": len(exports)}


def handle_fetch(state, message: dict) -> dict:
    """The exports as ordinary tensors (bytes on the wire): the fallback when the reference worker
    could not open them."""
    exports = getattr(state, "exports", {})
    tokens = message.get("exports")
    if type(tokens) is not list or not all(type(t) is int and t in exports for t in tokens):
        return {"ok": False, "status": "RUNTIME_ERROR", "log": "fetch: unknown export ids"}
    return {"ok": True, "tensors": [exports[t] for t in tokens]}


# -- the reference worker: receive -------------------------------------------------------------------

def handle_receive(state, message: dict) -> dict:
    """Open the exports, copy them into this worker's memory, close them; the judge takes the copies.

    Replies ok with `transfer_error` "forged" (a descriptor the harness never writes, or a range
    beyond the exported allocation) or "unavailable" (bytes must carry it) instead of failing, so
    the orchestrator can tell the solution's fault from the machine's.
    """
    state.received = {}
    try:
        descriptors = check_descriptors(message.get("exports"))
        state.received = import_exports(state, descriptors)
    except TransferRefused as exc:
        return {"ok": True, "transfer_error": "forged", "detail": str(exc)[:500]}
    except TransferUnavailable as exc:
        return {"ok": True, "transfer_error": "unavailable", "detail": str(exc)[:500], "healthy": _healthy(state)}
    return {"ok": True, "received": sorted(state.received)}


def _healthy(state) -> bool:
    """Whether this worker's CUDA context still works (False: the orchestrator replaces the worker)."""
    if not state.is_cuda:
        return True
    try:
        state.torch.cuda.synchronize()
        state.torch.zeros(1, device=state.device).add_(1).item()
    except RuntimeError:
        return False
    return True


def import_exports(state, descriptors: list[Descriptor]) -> dict[int, Any]:
    torch = state.torch
    driver = getattr(state, "cuda_driver", None)
    if driver is None:
        raise TransferUnavailable(getattr(state, "ipc_unavailable", None) or "no CUDA driver bound")
    try:
        identity = device_identity(state)
        torch.cuda.synchronize()
    except RuntimeError as exc:
        raise TransferUnavailable(f"CUDA: {exc}") from None
    foreign = [d.device for d in descriptors if d.device != identity]
    if foreign:
        raise TransferUnavailable(f"exported on another device ({foreign[0]}; this worker has {identity})")
    opened: dict[bytes, tuple[int, int]] = {}
    copies: dict[int, Any] = {}
    try:
        driver.require_context()
        for d in descriptors:
            if d.handle not in opened:  # one handle per allocation: open each once
                pointer = driver.open(d.handle)
                opened[d.handle] = (pointer, 0)
                base, size = driver.allocation(pointer)
                if base != pointer:
                    raise TransferUnavailable("the opened allocation does not start at the mapped address")
                opened[d.handle] = (pointer, size)
            pointer, size = opened[d.handle]
            if d.offset + d.nbytes > size:
                raise TransferRefused(f"bytes [{d.offset}, {d.offset + d.nbytes}) requested from an exported "
                                      f"allocation of {size} bytes")
            try:
                destination = torch.empty(d.nbytes, dtype=torch.uint8, device=state.device)
            except torch.cuda.OutOfMemoryError as exc:
                raise TransferUnavailable(f"no room for the copy: {exc}") from None
            driver.copy(destination.data_ptr(), pointer + d.offset, d.nbytes)
            copies[d.token] = (destination, d)
        driver.synchronize()
    finally:
        if opened:  # every copy is complete before any handle is closed, on every path
            with contextlib.suppress(TransferUnavailable):
                driver.synchronize()
        for pointer, _ in opened.values():
            driver.close(pointer)
    return {token: buffer.view(dtypes.torch_dtype(d.dtype)).reshape(d.shape) for token, (buffer, d) in copies.items()}


def forget_received(state) -> None:
    if getattr(state, "received", None):
        state.received = {}


def take_received(state, value: Any):
    """The copy a `receive` made for a judge placeholder (each copy is used once)."""
    token = value.get(RECEIVED_KEY)
    received = getattr(state, "received", {})
    if type(token) is not int or token not in received:
        raise KeyError(f"no received output {token!r}")
    return received.pop(token)
