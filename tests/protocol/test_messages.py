"""Every protocol message survives encode -> framing -> decode (solbench.protocol.codec), and malformed ones are refused clearly."""

from __future__ import annotations

import socket
from dataclasses import fields
from multiprocessing.connection import Connection

import pytest
import torch

from solbench.protocol import codec, framing
from solbench.protocol import messages as msg
from solbench.spec import Correctness, Definition, Environment, Solution, Workload
from solbench.spec.solution import reference_solution
from solbench.timing.config import TimingConfig
from tests.spec.spec_builders import make_definition

TIMING = TimingConfig.cpu()
DEFINITION = Definition.from_dict(make_definition())
SOLUTION: Solution = reference_solution(DEFINITION)
W = {"uuid": "u"}  # a workload's dict form
WORKLOAD = Workload.from_dict(W)

# One filled-in example per request and reply type: every field given a non-default value where it has one.
REQUESTS = [
    msg.Load(definition=DEFINITION, solution=SOLUTION, work_dir="/tmp/w", compile_timeout_s=30.0,
             data_roots=["/data"]),
    msg.Call(workload=WORKLOAD, seed=7, ipc_min_bytes=1 << 20),
    msg.Judge(workload=WORKLOAD, seed=7, outputs=[torch.arange(4, dtype=torch.float32), 2.5]),
    msg.Inputs(workload=WORKLOAD, seed=3, run=True),
    msg.Time(workload=WORKLOAD, seeds=[1, 2], config=TIMING, checked_outputs=2, required_outputs=1,
             fresh_inputs_budget_s=0.5, ipc_min_bytes=64, probe=False, max_slots=4),
    msg.TimeCompiled(workload=WORKLOAD, seeds=[1], config=TIMING, checked_outputs=0),
    msg.TimeBaseline(workload=WORKLOAD, seeds=[1], config=TIMING, baseline=SOLUTION, compile_timeout_s=9.0),
    msg.Environment(),
    msg.Receive(exports=[{"__cuda_ipc__": 1}]),
    msg.Release(exports=[1, 2]),
    msg.Fetch(exports=[3]),
    msg.Trim(min_bytes=1000),
    msg.Ping(),
    msg.Shutdown(),
]
REPLIES = [
    (msg.Load, msg.Loaded(audit=["runtime: ctypes.dlopen"])),
    (msg.Call, msg.Called(outputs=[torch.ones(2, 3)], call_s=0.01, aliased_inputs=["x"], mutated_inputs=["y"])),
    (msg.Judge, msg.Judged(status="PASSED", correctness=Correctness(matched_ratio=1.0), aliased_inputs=["x"])),
    (msg.Inputs, msg.InputsBuilt()),
    (msg.Time, msg.Timed(samples_ms=[1.0, 2], warmup=3, wall_s=0.1, sampled=[[0, 0, 5, [torch.zeros(1)]]],
                         stop_reason="ci_target", flags=["wide_ci"], slots=8, clocks_before={"sm_mhz": 1980},
                         clocks_after=None, energy_mj_per_call=1.5, host_ms=[0.01], hold_ms=0.02, exposed=1,
                         probe={"cupti": "used"}, aliased_inputs=[])),
    (msg.Environment, msg.EnvironmentRead(environment=Environment(device="cpu", torch="2.13.0"))),
    (msg.Receive, msg.Received(received=[1], transfer_error="unavailable", detail="x", healthy=False)),
    (msg.Release, msg.Released(held=2)),
    (msg.Fetch, msg.Fetched(tensors=[torch.ones(3, dtype=torch.int64)])),
    (msg.Trim, msg.Trimmed(freed_bytes=10, held_bytes=0)),
    (msg.Ping, msg.Pong()),
    (msg.Shutdown, msg.Stopped()),
    (msg.Time, msg.Failed(status="RUNTIME_ERROR", log="boom", capture_failed="not captured")),
]


def through_the_wire(data: dict) -> dict:
    """`data` sent over a real socket pair in the wire format and read back."""
    a, b = socket.socketpair()
    sender, receiver = Connection(a.detach()), Connection(b.detach())
    try:
        framing.send(sender, data)
        return framing.recv(receiver)
    finally:
        sender.close()
        receiver.close()


def same(x, y) -> bool:
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)
    if isinstance(x, (list, tuple)):
        return isinstance(y, (list, tuple)) and len(x) == len(y) and all(same(a, b) for a, b in zip(x, y))
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    return x == y


def test_every_op_has_an_example():
    assert {type(r) for r in REQUESTS} == set(msg.REQUESTS.values())
    assert {type(r) for _, r in REPLIES} >= set(msg.REPLIES.values()) | {msg.Failed}


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: r.OP)
def test_every_request_decodes_from_its_encoded_form(request_):
    request_id, decoded = codec.decode_request(through_the_wire(codec.encode(request_, 41)))
    assert request_id == 41 and type(decoded) is type(request_)
    for f in fields(request_):
        assert same(getattr(decoded, f.name), getattr(request_, f.name)), f.name


@pytest.mark.parametrize("kind, reply", REPLIES, ids=lambda x: getattr(x, "OP", None) or type(x).__name__)
def test_every_reply_decodes_from_its_encoded_form(kind, reply):
    request_ = next(r for r in REQUESTS if type(r) is kind)
    decoded = codec.decode_reply(request_, through_the_wire(codec.encode(reply, 9, request_.OP)), 9)
    assert type(decoded) is type(reply)
    for f in fields(reply):
        assert same(getattr(decoded, f.name), getattr(reply, f.name)), f.name


def test_the_timed_variants_are_answered_like_a_timed_block():
    request_ = REQUESTS[5]
    reply = msg.Timed(samples_ms=[1.0], warmup=0, wall_s=0.0, sampled=[])
    assert type(codec.decode_reply(request_, codec.encode(reply, 1, request_.OP))) is msg.Timed


def envelope(op: str, **fields) -> dict:
    return {"v": msg.PROTOCOL_VERSION, "op": op, "id": 1, **fields}


@pytest.mark.parametrize("data, fragment", [
    (envelope("format_disk"), "unknown op 'format_disk'"),
    (envelope("call", workload=W), "missing field 'seed'"),
    (envelope("call", workload=W, seed="7"), "Call.seed: a str where int is declared"),
    (envelope("call", workload=W, seed=True), "Call.seed: a bool where int is declared"),
    (envelope("call", workload=W, seed=1, shell="rm -rf"), "unexpected field(s) ['shell']"),
    (envelope("release", exports=[1, "2"]), "Release.exports"),
    (envelope("call", workload={"uuid": "u", "axes": {"m": -1}}, seed=1), "Call.workload: workload u: axes.m: must be at least 0"),
    (envelope("call", workload=[], seed=1), "Call.workload: a list (0 items) where a Workload is declared"),
    (envelope("load", definition={"name": "p"}, solution={}, work_dir="/w"), "Load.definition: definition: axes: is missing"),
    (envelope("time", workload=W, seeds=[1], config={"warmup": 1, "no_such_setting": 2}), "no_such_setting"),
    (envelope("time", workload=W, seeds=[1], config={"warmup": -1}), "warmup must be >= 0"),
    (envelope("time", workload=W, seeds=[1], config="fast"), "Time.config: a str where a TimingConfig is declared"),
    ({**envelope("ping"), "v": 0}, "protocol version 0"),
    ({"op": "ping", "id": 1}, "protocol version None"),
    ([1, 2], "a message is a dict"),
    (envelope("ping", id="one"), "request id 'one'"),
])
def test_malformed_requests_are_refused_with_a_clear_error(data, fragment):
    with pytest.raises(codec.ProtocolError) as refused:
        codec.decode_request(data)
    assert fragment in str(refused.value)


@pytest.mark.parametrize("data, fragment", [
    (envelope("call", ok=True, outputs=[], call_s=0.1), None),  # well-formed: decodes
    (envelope("call", ok=True, outputs=[]), "missing field 'call_s'"),
    (envelope("call", ok=True, outputs={}, call_s=0.1), "Called.outputs: a dict where list is declared"),
    (envelope("call", ok="yes", outputs=[], call_s=0.1), "boolean 'ok'"),
    (envelope("call", outputs=[], call_s=0.1), "boolean 'ok'"),
    (envelope("call", ok=False, log="x"), "missing field 'status'"),
    (envelope("call", ok=False, status="PASSED", graph_note="forged"), "unexpected field(s) ['graph_note']"),
    (envelope("time", ok=True, samples_ms=[1.0], warmup=0, wall_s=0.0, sampled=[], graph_note="x"),
     "unexpected field(s) ['graph_note']"),
    (envelope("time", ok=True, samples_ms=["1"], warmup=0, wall_s=0.0, sampled=[]), "Timed.samples_ms"),
    (envelope("judge", ok=True, status="PASSED", correctness={}), "a reply for op 'judge' arrived for a 'call'"),
    (envelope("time", ok=True, samples_ms=[1.0], warmup=0, wall_s=0.0, sampled=[], phases_s={"loop": "1"}),
     "Timed.phases_s"),
    ({**envelope("call", ok=True, outputs=[], call_s=0.1), "id": 2}, "reply to request 2 arrived while request 1"),
    ({**envelope("call", ok=True, outputs=[], call_s=0.1), "v": 99}, "protocol version 99"),
])
def test_malformed_replies_are_refused_with_a_clear_error(data, fragment):
    asked = "call" if data["op"] == "judge" else data["op"]  # the judge reply answers the wrong request
    request_ = next(r for r in REQUESTS if r.OP == asked)
    if fragment is None:
        assert isinstance(codec.decode_reply(request_, data, 1), msg.Called)
        return
    with pytest.raises(codec.ProtocolError) as refused:
        codec.decode_reply(request_, data, 1)
    assert fragment in str(refused.value)


def test_a_failure_reply_carries_a_failed_capture_as_a_field():
    decoded = codec.decode_reply(REQUESTS[4], codec.encode(msg.Failed(status="RUNTIME_ERROR", capture_failed="why"), 1, "time"))
    assert isinstance(decoded, msg.Failed) and decoded.capture_failed == "why" and not decoded.ok
