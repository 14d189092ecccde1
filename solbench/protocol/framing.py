"""The message format on the worker channel: JSON plus raw tensor bytes, never pickle.

The orchestrator must not unpickle anything a worker sends (unpickling runs code), and tensors
must not travel as shared memory the sender keeps (it could change them after they were judged).
So a message is one JSON frame in which each tensor is a placeholder, followed by the raw bytes of
each tensor; the receiver builds fresh tensors that own those bytes.

Framing: an 8-byte big-endian length, that many bytes of JSON (`{"body": ..., "tensors": [nbytes,
...]}`), then each tensor's bytes in order. Bytes are written straight from the tensor's memory (a
GPU tensor goes through a pinned staging buffer, chunk by chunk, so no host copy of the whole
tensor is made) and read straight into the memory of the tensor that will hold them: each hop
costs one copy, made by the kernel. A reader may give a deadline; a sender that stalls mid-message
then raises `WireTimeout` instead of blocking the reader forever.

(Large GPU outputs between two workers on one device can skip this path: `solbench.worker.transfer`.)
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from multiprocessing.connection import Connection
from typing import Any

import torch

from solbench.spec import dtypes
from solbench.spec.errors import SpecError

_TENSOR_KEY = "__tensor__"
_LENGTH = struct.Struct("!Q")
MAX_HEADER_BYTES = 64 << 20  # the JSON part; tensors travel outside it
MAX_DIMS = 64
STAGING_BYTES = 64 << 20  # GPU tensors are written through a pinned buffer of this size
_WRITE_LIMIT = 1 << 30  # bytes per write call (Linux writes at most ~2 GiB at once anyway)


class WireError(RuntimeError):
    """A message that does not follow the format (a broken or hostile sender)."""


class WireTimeout(Exception):
    """The sender stopped before its message was complete and the reader's deadline passed."""


def send(conn: Connection, message: Any) -> None:
    """Write one message. Everything that can fail on content (JSON encoding, unknown dtypes) fails
    before the first byte is written, so a refused message leaves the channel in step."""
    tensors: list = []
    body = _encode(message, tensors)
    header = json.dumps({"body": body, "tensors": [_nbytes(t) for t in tensors]}).encode()
    fd = conn.fileno()
    _write_all(fd, memoryview(_LENGTH.pack(len(header)) + header))
    for tensor in tensors:
        _write_tensor(fd, tensor)


def recv(conn: Connection, deadline: float | None = None, *, max_tensor_bytes: int | None = None) -> Any:
    """Read one message. `deadline` (time.monotonic) bounds the wait for each part of it;
    `max_tensor_bytes` bounds what its tensors may claim in total (default: the machine's memory)."""
    fd = conn.fileno()
    (length,) = _LENGTH.unpack(_read_exact(fd, _LENGTH.size, deadline))
    if length > MAX_HEADER_BYTES:
        raise WireError(f"message header of {length} bytes")
    try:
        frame = json.loads(_read_exact(fd, length, deadline))
        sizes = frame["tensors"]
        body = frame["body"]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise WireError(f"malformed message: {type(exc).__name__}: {exc}"[:500]) from None
    if type(sizes) is not list or not all(type(n) is int and n >= 0 for n in sizes):
        raise WireError("malformed tensor sizes")
    limit = memory_bytes() if max_tensor_bytes is None else max_tensor_bytes
    if sum(sizes) > limit:
        raise WireError(f"tensors of {sum(sizes)} bytes announced, more than the {limit} this side accepts")
    buffers = [_read_tensor_bytes(fd, n, deadline) for n in sizes]
    used: set[int] = set()
    try:
        return _decode(body, buffers, used)
    except RecursionError:
        raise WireError("message nested too deeply") from None


def memory_bytes() -> int:
    """Physical memory of this machine (no message may claim more)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


# -- writing -----------------------------------------------------------------------------------------

def _encode(value: Any, tensors: list) -> Any:
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {_TENSOR_KEY: len(tensors) - 1, "dtype": dtypes.name_of(value.dtype), "shape": list(value.shape)}
    if isinstance(value, dict):
        return {str(k): _encode(v, tensors) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, tensors) for v in value]
    return value


def _nbytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _write_all(fd: int, view: memoryview) -> None:
    while len(view):
        written = os.write(fd, view[:_WRITE_LIMIT])
        view = view[written:]


def _write_tensor(fd: int, tensor) -> None:
    if tensor.numel() == 0:
        return
    flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    if flat.device.type == "cpu":
        _write_all(fd, memoryview(flat.numpy()))
        return
    total = flat.numel()
    try:
        staging = torch.empty(min(total, STAGING_BYTES), dtype=torch.uint8, pin_memory=True)
    except RuntimeError:  # pinning refused: pageable memory works too, only slower
        staging = torch.empty(min(total, STAGING_BYTES), dtype=torch.uint8)
    host = memoryview(staging.numpy())
    for start in range(0, total, staging.numel()):
        count = min(staging.numel(), total - start)
        staging[:count].copy_(flat[start:start + count])  # synchronous: the bytes are there when it returns
        _write_all(fd, host[:count])


# -- reading -----------------------------------------------------------------------------------------

def _wait_readable(fd: int, deadline: float | None) -> None:
    if deadline is None:
        return
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WireTimeout("the sender stopped in the middle of a message")
        if poller.poll(min(remaining, 1.0) * 1000):
            return


def _read_into(fd: int, view: memoryview, deadline: float | None) -> None:
    position = 0
    while position < len(view):
        _wait_readable(fd, deadline)
        count = os.readv(fd, [view[position:]])
        if count == 0:
            raise EOFError("the channel closed in the middle of a message")
        position += count


def _read_exact(fd: int, count: int, deadline: float | None) -> bytes:
    data = bytearray(count)
    _read_into(fd, memoryview(data), deadline)
    return bytes(data)


def _read_tensor_bytes(fd: int, count: int, deadline: float | None):
    buffer = torch.empty(count, dtype=torch.uint8)
    if count:
        _read_into(fd, memoryview(buffer.numpy()), deadline)
    return buffer


def _decode(value: Any, buffers: list, used: set[int]) -> Any:
    if isinstance(value, dict):
        if _TENSOR_KEY in value:
            return _make_tensor(value, buffers, used)
        return {k: _decode(v, buffers, used) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, buffers, used) for v in value]
    return value


def _make_tensor(spec: dict, buffers: list, used: set[int]):
    """The tensor a placeholder names: its own buffer (each buffer backs exactly one tensor), viewed
    with the announced dtype and shape, which must account for every byte."""
    try:
        index, dtype = spec[_TENSOR_KEY], dtypes.torch_dtype(spec["dtype"])
        shape = spec["shape"]
        data = buffers[index]
    except (KeyError, IndexError, TypeError, ValueError, SpecError) as exc:
        raise WireError(f"malformed tensor placeholder: {exc}") from None
    if type(index) is not int or index < 0 or index in used:
        raise WireError(f"tensor placeholder {index!r} is not a fresh buffer index")
    if type(shape) is not list or len(shape) > MAX_DIMS or not all(type(s) is int and s >= 0 for s in shape):
        raise WireError("malformed tensor shape")
    used.add(index)
    numel = 1
    for size in shape:
        numel *= size
    itemsize = torch.empty((), dtype=dtype).element_size()
    if data.numel() != numel * itemsize:
        raise WireError(f"tensor of shape {shape} and dtype {spec['dtype']} arrived with {data.numel()} bytes")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return data.view(dtype).reshape(shape)
