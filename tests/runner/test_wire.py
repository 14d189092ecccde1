"""The channel format: round trips, one buffer per tensor, and hostile or stalled senders."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from multiprocessing.connection import Connection

import pytest
import torch

from solbench.protocol import framing as wire


@pytest.fixture
def channel():
    a, b = socket.socketpair()
    left, right = Connection(a.detach()), Connection(b.detach())
    yield left, right
    left.close()
    right.close()


def send_in_thread(conn, message):
    thread = threading.Thread(target=wire.send, args=(conn, message))
    thread.start()
    return thread


def raw(conn, header: dict, payload: bytes = b"") -> None:
    data = json.dumps(header).encode()
    conn_fd = conn.fileno()
    wire._write_all(conn_fd, memoryview(struct.pack("!Q", len(data)) + data + payload))


def test_round_trip_keeps_values_dtypes_and_shapes(channel):
    left, right = channel
    g = torch.Generator().manual_seed(0)
    message = {
        "op": "judge", "seed": 7, "nested": [{"x": torch.randn(3, 5, generator=g)}, (1, 2.5, None, "s")],
        "bf16": torch.randn(4, 4, generator=g).to(torch.bfloat16).t(),  # non-contiguous
        "fp8": torch.randn(6, generator=g).to(torch.float8_e4m3fn),
        "bool": torch.tensor([True, False, True]), "i64": torch.arange(10, dtype=torch.int64).reshape(2, 5),
        "empty": torch.empty(0, 3), "scalar_tensor": torch.tensor(3.0),
    }
    thread = send_in_thread(left, message)
    got = wire.recv(right, time.monotonic() + 30)
    thread.join()
    assert got["op"] == "judge" and got["seed"] == 7 and got["nested"][1] == [1, 2.5, None, "s"]
    for key in ("bf16", "fp8", "bool", "i64", "empty", "scalar_tensor"):
        assert got[key].dtype == message[key].dtype and got[key].shape == message[key].shape
        assert torch.equal(got[key].view(torch.uint8) if key == "fp8" else got[key],
                           message[key].contiguous().view(torch.uint8) if key == "fp8" else message[key])
    assert torch.equal(got["nested"][0]["x"], message["nested"][0]["x"])


def test_received_tensors_own_separate_memory_and_forward_unchanged(channel):
    left, right = channel
    outputs = [torch.arange(1000, dtype=torch.float32), torch.arange(1000, dtype=torch.float32) * 2]
    thread = send_in_thread(left, {"outputs": outputs})
    got = wire.recv(right)["outputs"]
    thread.join()
    assert got[0].untyped_storage().data_ptr() != got[1].untyped_storage().data_ptr()
    got[0].add_(1)  # writable, and writing does not touch the other
    assert torch.equal(got[1], outputs[1])
    thread = send_in_thread(right, {"outputs": got})  # the orchestrator forwards what it received
    again = wire.recv(left)["outputs"]
    thread.join()
    assert torch.equal(again[0], outputs[0] + 1) and torch.equal(again[1], outputs[1])


def test_a_refused_message_writes_nothing(channel):
    left, right = channel
    with pytest.raises(TypeError):
        wire.send(left, {"bad": object(), "t": torch.ones(3)})
    wire.send(left, {"ok": True})
    assert wire.recv(right, time.monotonic() + 5) == {"ok": True}


@pytest.mark.parametrize("header, payload, fragment", [
    ({"body": {"__tensor__": 0, "dtype": "float32", "shape": [3]}, "tensors": [8]}, b"\0" * 8, "arrived with 8 bytes"),
    ({"body": [{"__tensor__": 0, "dtype": "float32", "shape": [2]}] * 2, "tensors": [8]}, b"\0" * 8,
     "not a fresh buffer index"),
    ({"body": {"__tensor__": 1, "dtype": "float32", "shape": [2]}, "tensors": [8]}, b"\0" * 8, "placeholder"),
    ({"body": {"__tensor__": 0, "dtype": "complex_nonsense", "shape": [2]}, "tensors": [8]}, b"\0" * 8, "placeholder"),
    ({"body": {"__tensor__": 0, "dtype": "float32", "shape": [-2]}, "tensors": [8]}, b"\0" * 8, "shape"),
    ({"body": {"__tensor__": 0, "dtype": "float32", "shape": [2.0]}, "tensors": [8]}, b"\0" * 8, "shape"),
    ({"body": 1, "tensors": [-1]}, b"", "sizes"),
    ({"body": 1, "tensors": 3}, b"", "sizes"),
    ({"body": 1}, b"", "malformed message"),
    ({"body": 1, "tensors": [1 << 62]}, b"", "more than"),
])
def test_malformed_messages_are_wire_errors(channel, header, payload, fragment):
    left, right = channel
    raw(left, header, payload)
    with pytest.raises(wire.WireError, match=fragment):
        wire.recv(right, time.monotonic() + 5)


def test_deep_nesting_and_huge_headers_are_wire_errors(channel):
    left, right = channel
    deep = b"[" * 100_000 + b"]" * 100_000
    wire._write_all(left.fileno(), memoryview(struct.pack("!Q", len(deep)) + deep))
    with pytest.raises(wire.WireError):
        wire.recv(right, time.monotonic() + 5)
    wire._write_all(left.fileno(), memoryview(struct.pack("!Q", wire.MAX_HEADER_BYTES + 1)))
    with pytest.raises(wire.WireError, match="header"):
        wire.recv(right, time.monotonic() + 5)


def test_a_sender_stalling_mid_message_times_out(channel):
    left, right = channel
    raw(left, {"body": {"__tensor__": 0, "dtype": "uint8", "shape": [100]}, "tensors": [100]}, b"\1" * 10)
    started = time.monotonic()
    with pytest.raises(wire.WireTimeout):
        wire.recv(right, time.monotonic() + 0.5)
    assert time.monotonic() - started < 5


def test_a_sender_closing_mid_message_is_eof(channel):
    left, right = channel
    raw(left, {"body": 1, "tensors": [100]}, b"\1" * 10)
    left.close()
    with pytest.raises(EOFError):
        wire.recv(right, time.monotonic() + 5)


def test_big_tensor_round_trip(channel):
    left, right = channel
    big = torch.arange(24 << 20, dtype=torch.int32)  # 96 MiB
    thread = send_in_thread(left, [big])
    got = wire.recv(right, time.monotonic() + 60)[0]
    thread.join()
    assert torch.equal(got, big)
