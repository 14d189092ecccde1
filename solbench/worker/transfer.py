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
import ctypes
import itertools
import time
from typing import Any

from solbench.protocol import messages as msg
from solbench.protocol.descriptors import (
    HANDLE_BYTES,
    IPC_KEY,
    RECEIVED_KEY,
    Descriptor,
    TransferRefused,
    check_descriptors,
)
from solbench.spec import dtypes
from solbench.worker.state import Failure, WorkerState

_perf_counter = time.perf_counter  # bound at import, before any solution code runs

_NEXT_EXPORT = itertools.count(1)


class TransferUnavailable(Exception):
    """CUDA IPC cannot carry this transfer here (bytes must)."""


# -- the CUDA driver -----------------------------------------------------------------------------------

class CudaDriver:
    """The few driver entry points IPC needs (libcuda through ctypes)."""

    def __init__(self) -> None:
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


def bind_driver(state: WorkerState) -> None:
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


def device_identity(state: WorkerState) -> str:
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

def release_all(state: WorkerState) -> None:
    """Drop every export (a new call or timed block starts: the orchestrator is done with the last ones)."""
    state.exports.clear()


def export_outputs(state: WorkerState, outputs: list, min_bytes: Any, *, copy: bool) -> list:
    """`outputs` with each CUDA tensor of at least `min_bytes` replaced by an IPC descriptor.

    `copy`: export a fresh contiguous copy (a trial's outputs are the solution's own tensors) rather
    than the tensor itself (the timed block's sampled outputs are already the harness's copies). A
    tensor that cannot be exported stays a tensor and travels as bytes.
    """
    torch = state.torch
    if type(min_bytes) is not int or min_bytes <= 0 or state.cuda_driver is None:
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


def _export_one(state: WorkerState, value, copy: bool) -> dict | None:
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


def handle_release(state: WorkerState, request: msg.Release) -> msg.Released:
    """Drop the named exports (the reference worker has its copies, or the transfer was abandoned)."""
    for token in request.exports:
        state.exports.pop(token, None)
    return msg.Released(held=len(state.exports))


def handle_fetch(state: WorkerState, request: msg.Fetch) -> msg.Fetched:
    """The exports as ordinary tensors (bytes on the wire): the fallback when the reference worker
    could not open them."""
    if not all(t in state.exports for t in request.exports):
        raise Failure("RUNTIME_ERROR", "fetch: unknown export ids")
    return msg.Fetched(tensors=[state.exports[t] for t in request.exports])


# -- the reference worker: receive -------------------------------------------------------------------

def handle_receive(state: WorkerState, request: msg.Receive) -> msg.Received:
    """Open the exports, copy them into this worker's memory, close them; the judge takes the copies.

    Replies with `transfer_error` "forged" (a descriptor the harness never writes, or a range beyond the
    exported allocation) or "unavailable" (bytes must carry it) instead of failing, so the orchestrator
    can tell the solution's fault from the machine's.
    """
    state.received = {}
    phases: dict[str, float] = {}
    try:
        descriptors = check_descriptors(request.exports)
        state.received = import_exports(state, descriptors, phases)
    except TransferRefused as exc:
        return msg.Received(transfer_error="forged", detail=str(exc)[:500])
    except TransferUnavailable as exc:
        return msg.Received(transfer_error="unavailable", detail=str(exc)[:500], healthy=_healthy(state))
    return msg.Received(received=sorted(state.received), phases_s=phases)


def _healthy(state: WorkerState) -> bool:
    """Whether this worker's CUDA context still works (False: the orchestrator replaces the worker)."""
    if not state.is_cuda:
        return True
    try:
        state.torch.cuda.synchronize()
        state.torch.zeros(1, device=state.device).add_(1).item()
    except RuntimeError:
        return False
    return True


def import_exports(state: WorkerState, descriptors: list[Descriptor],
                   phases: dict[str, float] | None = None) -> dict[int, Any]:
    """Copies of the exported ranges; `phases` gets the seconds spent opening the handles
    (`ipc_open`), copying (`ipc_copy`) and closing them (`ipc_close`)."""
    torch = state.torch
    phases = {} if phases is None else phases

    def charge(name: str, since: float) -> None:
        phases[name] = phases.get(name, 0.0) + _perf_counter() - since

    driver = state.cuda_driver
    if driver is None:
        raise TransferUnavailable(state.ipc_unavailable or "no CUDA driver bound")
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
                started = _perf_counter()
                pointer = driver.open(d.handle)
                opened[d.handle] = (pointer, 0)
                base, size = driver.allocation(pointer)
                if base != pointer:
                    raise TransferUnavailable("the opened allocation does not start at the mapped address")
                opened[d.handle] = (pointer, size)
                charge("ipc_open", started)
            started = _perf_counter()
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
            charge("ipc_copy", started)
        started = _perf_counter()
        driver.synchronize()
        charge("ipc_copy", started)
    finally:
        if opened:  # every copy is complete before any handle is closed, on every path
            with contextlib.suppress(TransferUnavailable):
                driver.synchronize()
        started = _perf_counter()
        for pointer, _ in opened.values():
            driver.close(pointer)
        charge("ipc_close", started)
    return {token: buffer.view(dtypes.torch_dtype(d.dtype)).reshape(d.shape) for token, (buffer, d) in copies.items()}


def forget_received(state: WorkerState) -> None:
    state.received = {}


def take_received(state: WorkerState, value: Any):
    """The copy a `receive` made for a judge placeholder (each copy is used once)."""
    token = value.get(RECEIVED_KEY)
    if type(token) is not int or token not in state.received:
        raise KeyError(f"no received output {token!r}")
    return state.received.pop(token)
