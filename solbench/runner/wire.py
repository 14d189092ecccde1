"""The message format on the worker channel: JSON plus raw tensor bytes, never pickle.

The orchestrator must not unpickle anything a worker sends (unpickling runs code), and tensors
must not travel as shared memory (the sender could change them after they were judged). So a
message is one JSON frame in which each tensor is a placeholder, followed by one raw-bytes frame
per tensor; the receiver builds fresh tensors from copies of those bytes.
"""

from __future__ import annotations

import json
from multiprocessing.connection import Connection
from typing import Any

from solbench.spec import dtypes

_TENSOR_KEY = "__tensor__"


class WireError(RuntimeError):
    """A message that does not follow the format (a broken or hostile sender)."""


def send(conn: Connection, message: Any) -> None:
    tensors: list = []
    header = _encode(message, tensors)
    conn.send_bytes(json.dumps({"body": header, "tensors": len(tensors)}).encode())
    for tensor in tensors:
        conn.send_bytes(_tensor_bytes(tensor))


def recv(conn: Connection) -> Any:
    try:
        frame = json.loads(conn.recv_bytes())
        count = frame["tensors"]
        body = frame["body"]
    except (ValueError, KeyError, TypeError) as exc:
        raise WireError(f"malformed message: {exc}") from None
    if not isinstance(count, int) or count < 0:
        raise WireError("malformed tensor count")
    buffers = [conn.recv_bytes() for _ in range(count)]
    return _decode(body, buffers)


def _encode(value: Any, tensors: list) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {_TENSOR_KEY: len(tensors) - 1, "dtype": dtypes.name_of(value.dtype), "shape": list(value.shape)}
    if isinstance(value, dict):
        return {str(k): _encode(v, tensors) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, tensors) for v in value]
    return value


def _tensor_bytes(tensor) -> bytes:
    import torch

    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    return flat.view(torch.uint8).numpy().tobytes()


def _decode(value: Any, buffers: list[bytes]) -> Any:
    if isinstance(value, dict):
        if _TENSOR_KEY in value:
            return _make_tensor(value, buffers)
        return {k: _decode(v, buffers) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, buffers) for v in value]
    return value


def _make_tensor(spec: dict, buffers: list[bytes]):
    import torch

    try:
        index, dtype, shape = spec[_TENSOR_KEY], dtypes.torch_dtype(spec["dtype"]), [int(s) for s in spec["shape"]]
        data = buffers[index]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise WireError(f"malformed tensor placeholder: {exc}") from None
    numel = 1
    for size in shape:
        if size < 0:
            raise WireError("negative tensor size")
        numel *= size
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(data) != numel * itemsize:
        raise WireError(f"tensor of shape {shape} and dtype {spec['dtype']} arrived with {len(data)} bytes")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)
