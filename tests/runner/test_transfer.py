"""CUDA IPC of large outputs (solbench.worker.transfer, solbench.orchestrator.delivery), as far as it can be checked without a GPU:
descriptor validation, the orchestrator's protocol and fallback to bytes, and the workers'
handlers. The GPU path: test_transfer_gpu.py."""

from __future__ import annotations

import os
import time

import pytest
import torch

from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.delivery import deliver
from solbench.orchestrator.evaluate import evaluate_workload
from solbench.orchestrator.session import DeviceSession, StepFailed
from solbench.orchestrator.sizes import expected_outputs
from solbench.protocol import codec, descriptors
from solbench.protocol import messages as msg
from solbench.spec.problem import load_problem
from solbench.spec.solution import load_solution, reference_solution
from solbench.spec.trace import Correctness, Status
from solbench.worker import transfer
from tests.runner.conftest import write_problem, write_solution

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def descriptor(token: int = 1, shape=(64,), dtype: str = "float32", **changes) -> dict:
    numel = 1
    for s in shape:
        numel *= s
    value = {descriptors.IPC_KEY: token, "handle": "ab" * 64, "offset": 512, "nbytes": numel * 4, "dtype": dtype,
             "shape": list(shape), "device": "uuid:GPU-test"}
    value.update(changes)
    return value


# -- descriptors ------------------------------------------------------------------------------------------

def test_a_well_formed_descriptor_is_accepted():
    d = descriptors.check_descriptor(descriptor(shape=(4, 16)), ("float32", (4, 16)))
    assert (d.token, d.offset, d.nbytes, d.shape, d.dtype) == (1, 512, 256, (4, 16), "float32")
    assert d.handle == bytes.fromhex("ab" * 64)


@pytest.mark.parametrize("changes, fragment", [
    ({"offset": -8}, "offset"),
    ({"offset": 2**60}, "offset"),
    ({"offset": 1.5}, "offset"),
    ({"nbytes": 255}, "bytes for shape"),
    ({"nbytes": 0, "shape": [0]}, "bytes for shape"),
    ({"handle": "ab" * 63}, "64 bytes"),
    ({"handle": "zz" * 64}, "64 bytes"),
    ({"handle": 7}, "64 bytes"),
    ({"dtype": "complex128"}, "dtype"),
    ({"shape": [-64]}, "shape"),
    ({"shape": "64"}, "shape"),
    ({descriptors.IPC_KEY: -1}, "export id"),
    ({descriptors.IPC_KEY: True}, "export id"),
    ({"device": ["x"]}, "short string"),
    ({"extra": 1}, "fields"),
])
def test_malformed_descriptors_are_refused(changes, fragment):
    value = descriptor()
    value.update(changes)
    with pytest.raises(descriptors.TransferRefused, match=fragment):
        descriptors.check_descriptor(value)


@pytest.mark.parametrize("expected", [("float32", (65,)), ("bfloat16", (64,)), ("float32", None)])
def test_descriptors_unlike_the_definition_are_refused(expected):
    with pytest.raises(descriptors.TransferRefused, match="definition declares"):
        descriptors.check_descriptor(descriptor(), expected)


def test_a_transfer_names_each_export_once():
    with pytest.raises(descriptors.TransferRefused, match="twice"):
        descriptors.check_descriptors([descriptor(3), descriptor(3)])
    with pytest.raises(descriptors.TransferRefused):
        descriptors.check_descriptors([])
    with pytest.raises(descriptors.TransferRefused):
        descriptors.check_descriptors([descriptor(i) for i in range(descriptors.MAX_EXPORTS_PER_MESSAGE + 1)])


# -- the orchestrator's side, against scripted workers -------------------------------------------------------

class Script:
    """Stands in for both workers of a GPU session: answers by (worker, op) and records requests."""

    def __init__(self, session: DeviceSession, **replies):
        self.session, self.replies, self.requests = session, replies, []

    def __call__(self, worker, message, timeout_s):
        role = "solution" if worker is self.session.candidate else "reference"
        self.requests.append((role, message))
        reply = self.replies.get(f"{role}:{message.OP}")
        if isinstance(reply, Exception):
            raise reply
        data = reply(message) if callable(reply) else dict(reply or {"ok": True})
        return codec.decode_reply(message, {"v": msg.PROTOCOL_VERSION, "op": message.OP, "id": None, **data})

    def ops(self) -> list[str]:
        return [f"{role}:{m.OP}" for role, m in self.requests]


@pytest.fixture
def gpu_session(tmp_path):
    session = DeviceSession("cuda:0", RunConfig(device="cuda:0"))  # no worker is ever started
    assert session.ipc_min_bytes() == 16 << 20  # and now IPC has been offered
    yield session
    session.close()


def test_received_outputs_become_placeholders_and_exports_are_released(gpu_session):
    script = Script(gpu_session, **{"reference:receive": {"ok": True, "received": [5]}})
    gpu_session.ask = script
    out = deliver(gpu_session, [descriptor(5), 2.5], [("float32", (64,)), ("float32", None)], 60)
    assert out == [{descriptors.RECEIVED_KEY: 5}, 2.5]
    assert script.ops() == ["reference:receive", "solution:release"]
    assert script.requests[1][1].exports == [5]
    assert gpu_session.ipc_usable


@pytest.mark.parametrize("failure", ["unavailable", "raises", "unconfirmed", "unhealthy"])
def test_ipc_trouble_falls_back_to_fetching_bytes(gpu_session, failure):
    receive = {"unavailable": {"ok": True, "transfer_error": "unavailable", "detail": "open failed", "healthy": True},
               "raises": StepFailed(Status.TIMEOUT, "no reply"),
               "unconfirmed": {"ok": True, "received": []},
               "unhealthy": {"ok": True, "transfer_error": "unavailable", "detail": "sticky", "healthy": False}}[failure]
    fetched = torch.arange(64, dtype=torch.float32)
    script = Script(gpu_session, **{"reference:receive": receive,
                                    "solution:fetch": {"ok": True, "tensors": [fetched]}})
    gpu_session.ask = script
    out = deliver(gpu_session, [descriptor(9)], [("float32", (64,))], 60)
    assert out[0] is fetched
    assert script.ops() == ["reference:receive", "solution:fetch", "solution:release"]
    assert not gpu_session.ipc_usable and gpu_session.ipc_min_bytes() is None
    assert any(w.startswith("transfer: CUDA IPC unavailable") for w in gpu_session.runtime_warnings)
    # descriptors from a request made before the fallback: fetched directly, no second receive
    script.requests.clear()
    deliver(gpu_session, [descriptor(10)], None, 60)
    assert script.ops() == ["solution:fetch", "solution:release"]


@pytest.mark.parametrize("case", ["not_offered", "forged_by_reference", "unlike_definition", "bad_fetch",
                                  "placeholder", "odd_output", "duplicate"])
def test_forged_transfers_are_reward_hacks(gpu_session, case):
    outputs, expected = [descriptor(4)], [("float32", (64,))]
    replies = {"reference:receive": {"ok": True, "received": [4]}}
    if case == "not_offered":
        gpu_session.ipc_offered = False
    elif case == "forged_by_reference":
        replies["reference:receive"] = {"ok": True, "transfer_error": "forged", "detail": "bytes [0, 9) of 8"}
    elif case == "unlike_definition":
        expected = [("float16", (64,))]
    elif case == "bad_fetch":
        gpu_session.ipc_usable = False
        replies["solution:fetch"] = {"ok": True, "tensors": [torch.zeros(63)]}
    elif case == "placeholder":
        outputs = [{descriptors.RECEIVED_KEY: 1}]
    elif case == "odd_output":
        outputs = [descriptor(4), None]
    elif case == "duplicate":
        outputs, expected = [descriptor(4), descriptor(4)], None
    script = Script(gpu_session, **replies)
    gpu_session.ask = script
    with pytest.raises(StepFailed) as caught:
        deliver(gpu_session, outputs, expected, 60)
    assert caught.value.status == Status.REWARD_HACK
    assert "solution:release" not in script.ops()


def test_plain_outputs_pass_through_untouched(gpu_session):
    script = Script(gpu_session)
    gpu_session.ask = script
    outputs = [torch.ones(3), 1, 2.0, True]
    assert deliver(gpu_session, outputs, None, 60) is outputs
    assert script.requests == []
    with pytest.raises(StepFailed) as caught:
        deliver(gpu_session, None, None, 60)  # a reply without outputs
    assert caught.value.status == Status.REWARD_HACK


def test_only_the_solution_is_offered_ipc_and_the_judge_gets_the_copies(tmp_path, gpu_session):
    """A whole workload against scripted workers: IPC fields go to the solution's call/time requests only,
    every descriptor is received before its judge, and every export is released."""
    problem = load_problem(write_problem(tmp_path / "p", sizes=(64,)))
    workload = problem.workloads[0]
    solution = load_solution(write_solution(tmp_path, "def run(x, y):\n    return x * 2.0 + y\n"), problem.definition)
    config = RunConfig(device="cuda:0", trials=2, timing_rounds=1, checked_timed_outputs=2, time_reference=False)
    gpu_session.config = config
    tokens = iter(range(100, 200))
    judged = []

    def call(message):
        return {"ok": True, "outputs": [descriptor(next(tokens))], "call_s": 0.001, "aliased_inputs": [],
                "mutated_inputs": []}

    def time_block(message):
        return {"ok": True, "samples_ms": [0.5] * 10, "warmup": 2, "wall_s": 0.01, "flags": [], "slots": 2,
                "sampled": [[3, 3, 11, [descriptor(next(tokens))]], [9, 9, 12, [descriptor(next(tokens))]]]}

    def receive(message):
        return {"ok": True, "received": sorted(e[descriptors.IPC_KEY] for e in message.exports)}

    def judge(message):
        judged.append(message.outputs)
        return {"ok": True, "status": "PASSED", "correctness": Correctness(trials=1).to_dict(),
                "aliased_inputs": [], "mutated_inputs": []}

    script = Script(gpu_session, **{"solution:call": call, "solution:time": time_block, "reference:receive": receive,
                                    "reference:judge": judge})
    gpu_session.ask = script
    trace = evaluate_workload(gpu_session, problem, solution, workload, config, 1, time.monotonic(), [])
    assert trace.status == Status.PASSED, trace.evaluation.log
    assert judged == [[{descriptors.RECEIVED_KEY: t}] for t in (100, 101, 102, 103)]
    for role, message in script.requests:
        offered = getattr(message, "ipc_min_bytes", None) is not None
        assert offered == (role == "solution" and message.OP in ("call", "time")), message
    released = [t for role, m in script.requests if m.OP == "release" for t in m.exports]
    assert released == [100, 101, 102, 103]
    assert expected_outputs(problem, workload) == [("float32", (64,))]


def test_a_cpu_session_never_offers_ipc():
    session = DeviceSession("cpu", RunConfig(device="cpu"))
    assert session.ipc_min_bytes() is None and not session.ipc_offered
    gpu = DeviceSession("cuda:0", RunConfig(device="cuda:0", ipc_min_bytes=None))
    assert gpu.ipc_min_bytes() is None


# -- the workers' handlers, in real (CPU) worker processes ------------------------------------------------------

@pytest.fixture(scope="module")
def cpu_workers(tmp_path_factory):
    """One pair of workers for the module's two tests (starting a pair costs two torch imports)."""
    tmp_path = tmp_path_factory.mktemp("cpu_workers")
    problem = load_problem(write_problem(tmp_path / "p", sizes=(64,)))
    session = DeviceSession("cpu", RunConfig(device="cpu"))
    session.load(session.reference, problem, reference_solution(problem.definition))
    solution = load_solution(write_solution(tmp_path, "def run(x, y):\n    return x * 2.0 + y\n"), problem.definition)
    session.load(session.candidate, problem, solution)
    yield session, problem
    session.close()


def test_worker_handlers_refuse_forgeries_and_report_unavailability(cpu_workers):
    session, problem = cpu_workers
    ask = session.reference.request
    assert ask(msg.Receive(exports=[descriptor(offset=-1)]), 60).transfer_error == "forged"
    assert ask(msg.Receive(exports=[{"nonsense": 1}]), 60).transfer_error == "forged"
    refused = ask(msg.Receive(exports="nonsense"), 60)  # not even a list: refused before any handler runs
    assert isinstance(refused, msg.Failed) and "protocol error" in refused.log
    reply = ask(msg.Receive(exports=[descriptor()]), 60)
    assert reply.transfer_error == "unavailable" and reply.healthy is True  # a CPU worker has no CUDA
    # a judge naming a copy that was never received fails in the reference worker (the orchestrator
    # never forwards such a placeholder from a solution: test_forged_transfers_are_reward_hacks)
    judge = ask(msg.Judge(workload=problem.workloads[0], seed=1,
                          outputs=[{descriptors.RECEIVED_KEY: 1}]), 60)
    assert isinstance(judge, msg.Failed) and "no received output" in judge.log
    candidate = session.candidate.request
    released = candidate(msg.Release(exports=[1, 2]), 60)
    assert isinstance(released, msg.Released) and released.held == 0
    junk = candidate(msg.Release(exports=[1, "x", None]), 60)
    assert isinstance(junk, msg.Failed) and "protocol error" in junk.log
    fetch = candidate(msg.Fetch(exports=[1]), 60)
    assert isinstance(fetch, msg.Failed) and "unknown export" in fetch.log


def test_a_cpu_call_sends_bytes_even_when_ipc_is_asked_for(cpu_workers):
    session, problem = cpu_workers
    reply = session.candidate.request(msg.Call(workload=problem.workloads[0], seed=3, ipc_min_bytes=1), 60)
    assert isinstance(reply, msg.Called) and type(reply.outputs[0]) is torch.Tensor


# -- the reference worker's import, against a driver that maps host memory -----------------------------------

class HostDriver:
    """Stands in for libcuda: 'exported allocations' are host buffers, copies are memmoves."""

    def __init__(self, allocations: dict[bytes, torch.Tensor], refuse: bool = False):
        self.allocations, self.refuse = allocations, refuse
        self.opened: list[int] = []
        self.closed: list[int] = []
        self.synchronized = 0

    def require_context(self):
        pass

    def open(self, handle: bytes) -> int:
        if self.refuse or handle not in self.allocations:
            raise transfer.TransferUnavailable("cuIpcOpenMemHandle failed: CUDA error 1 (CUDA_ERROR_INVALID_VALUE)")
        pointer = self.allocations[handle].data_ptr()
        self.opened.append(pointer)
        return pointer

    def allocation(self, pointer: int) -> tuple[int, int]:
        buffer = next(b for b in self.allocations.values() if b.data_ptr() == pointer)
        return pointer, buffer.numel()

    def copy(self, destination: int, source: int, count: int) -> None:
        import ctypes

        ctypes.memmove(destination, source, count)

    def synchronize(self) -> None:
        self.synchronized += 1

    def close(self, pointer: int) -> None:
        self.closed.append(pointer)


class HostState:
    def __init__(self, driver, identity: str = "uuid:GPU-test"):
        props = type("Props", (), {"uuid": type("Uuid", (), {"__str__": lambda self: identity[5:]})()})()
        cuda = type("Cuda", (), {"synchronize": staticmethod(lambda: None), "OutOfMemoryError": torch.cuda.OutOfMemoryError,
                                 "get_device_properties": staticmethod(lambda index: props)})
        self.torch = type("Torch", (), {"cuda": cuda, "empty": staticmethod(torch.empty), "zeros": staticmethod(torch.zeros),
                                        "uint8": torch.uint8})
        self.device, self.is_cuda, self.cuda_driver, self.received = "cpu", True, driver, {}


def exported(handle: str = "ab" * 64) -> dict[bytes, torch.Tensor]:
    return {bytes.fromhex(handle): torch.arange(1024, dtype=torch.int32).view(torch.uint8).clone()}


def test_import_copies_the_named_bytes_and_closes_each_handle_once():
    allocations = exported()
    driver = HostDriver(allocations)
    state = HostState(driver)
    first = descriptor(1, shape=(16,), offset=64)  # int32 elements 16..31
    second = descriptor(2, shape=(4,), offset=4080)  # the last 4 elements
    reply = transfer.handle_receive(state, msg.Receive(exports=[first, second]))
    assert reply.received == [1, 2] and reply.transfer_error is None
    assert set(reply.phases_s) == {"ipc_open", "ipc_copy", "ipc_close"}  # one handle: opened once, closed once
    source = allocations[bytes.fromhex("ab" * 64)].view(torch.float32)
    assert torch.equal(state.received[1].view(torch.uint8), source[16:32].view(torch.uint8))
    assert torch.equal(state.received[2].view(torch.uint8), source[1020:].view(torch.uint8))
    assert state.received[1].data_ptr() != source.data_ptr()  # a copy, owned by the receiver
    assert driver.opened == driver.closed and len(driver.opened) == 1 and driver.synchronized >= 1
    assert torch.equal(transfer.take_received(state, {descriptors.RECEIVED_KEY: 2}).view(torch.uint8),
                       source[1020:].view(torch.uint8))
    with pytest.raises(KeyError):
        transfer.take_received(state, {descriptors.RECEIVED_KEY: 2})  # each copy is used once


@pytest.mark.parametrize("offset, shape", [(4096, (1,)), (4080, (5,)), (0, (1025,))])
def test_import_refuses_ranges_outside_the_allocation(offset, shape):
    driver = HostDriver(exported())
    state = HostState(driver)
    good = descriptor(1, shape=(4,), offset=0)
    reply = transfer.handle_receive(state, msg.Receive(exports=[good, descriptor(2, shape=shape, offset=offset)]))
    assert reply.transfer_error == "forged" and "requested from an exported allocation" in reply.detail
    assert state.received == {} and driver.opened == driver.closed and driver.synchronized >= 1


def test_import_reports_unopenable_handles_and_other_devices_as_unavailable():
    driver = HostDriver(exported(), refuse=True)
    reply = transfer.handle_receive(HostState(driver), msg.Receive(exports=[descriptor()]))
    assert reply.transfer_error == "unavailable" and "cuIpcOpenMemHandle" in reply.detail
    driver = HostDriver(exported())
    reply = transfer.handle_receive(HostState(driver, identity="uuid:GPU-other"), msg.Receive(exports=[descriptor()]))
    assert reply.transfer_error == "unavailable" and "another device" in reply.detail
    assert driver.opened == []
