"""The harness's own copies of inputs stay within a memory budget: timed-block slots and recent
fresh sets, and the `trim` request that drops a worker's input cache while the other is timed."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
import torch

from solbench import api
from solbench.check.anticheat import timed_call_seed
from solbench.orchestrator import session as session_module
from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.session import DeviceSession, StepFailed
from solbench.orchestrator.sizes import declared_set_bytes
from solbench.protocol import messages as msg
from solbench.spec.problem import load_problem
from solbench.spec.solution import load_solution, reference_solution
from solbench.spec.trace import Status
from solbench.timing.config import TimingConfig
from solbench.worker import calls, inputs_cache, timed_block, timed_draws
from solbench.worker import slots as worker_slots
from solbench.worker.state import Failure, WorkerState
from tests.runner.conftest import write_problem, write_solution

GOOD = "import torch\n\ndef run(x, y):\n    return x * 2.0 + y\n"


def test_build_slots_fits_the_budget_with_at_least_one_slot():
    state = WorkerState("cpu")
    state.destination_passing = False
    inputs = [torch.zeros(1024), torch.zeros(1024)]  # 8 KiB a set
    assert len(worker_slots.build_slots(state, [inputs], {}, 8, 3 * 8192)) == 3
    assert len(worker_slots.build_slots(state, [inputs], {}, 2, 3 * 8192)) == 2
    single = worker_slots.build_slots(state, [inputs], {}, 8, 100)
    assert len(single) == 1 and single[0][0][0].data_ptr() != inputs[0].data_ptr()


def test_slots_start_as_copies_of_the_template_not_uninitialised_memory():
    """CUDA graph warm-up and capture call the code before any `prepare`: garbage indices there
    tripped device-side asserts on the H100 (index_add_ with custom index inputs)."""
    state = WorkerState("cpu")
    state.destination_passing = False
    template = [torch.arange(1024, dtype=torch.int64), torch.randn(1024), 3]
    slots = worker_slots.build_slots(state, [template], {}, 4, 1 << 20)
    assert len(slots) == 4
    for inputs, _ in slots:
        assert torch.equal(inputs[0], template[0]) and torch.equal(inputs[1], template[1]) and inputs[2] == 3
        assert inputs[0].data_ptr() != template[0].data_ptr()


def test_recent_fresh_sets_fit_the_budget_with_at_least_one():
    assert worker_slots.recent_sets_limit(100, 250) == 2
    assert worker_slots.recent_sets_limit(100, 50) == 1
    assert worker_slots.recent_sets_limit(1, 1 << 30) == worker_slots.RECENT_SETS


@pytest.fixture
def loaded(tmp_path, monkeypatch):
    """A solution loaded into an in-process worker state, with two trials' inputs cached."""
    problem = load_problem(write_problem(tmp_path / "p", sizes=(64,)))
    solution = load_solution(write_solution(tmp_path, GOOD), problem.definition)
    monkeypatch.setattr(timed_block, "background_activity", lambda state: None)  # pytest's own children
    monkeypatch.setattr(sys, "path", list(sys.path))
    state = WorkerState("cpu")
    calls.handle_load(state, msg.Load(definition=problem.definition, solution=solution,
                                      work_dir=str(tmp_path / "w")))
    wdata = problem.workloads[0]
    for seed in (11, 12):
        calls.handle_call(state, msg.Call(workload=wdata, seed=seed))
    return state, wdata


def time_block(state, wdata) -> msg.Timed:
    config = RunConfig(device="cpu", warmup=1, iters=6, adaptive=False)
    return timed_block.handle_time(state, msg.Time(workload=wdata, seeds=[21, 22], checked_outputs=2,
                                                   config=config.timing_config("cpu")))


def test_a_timed_block_with_room_for_one_slot_says_so(loaded, monkeypatch):
    state, wdata = loaded
    reply = time_block(state, wdata)
    assert reply.slots >= 2 and "timed_inputs_single_slot" not in reply.flags
    monkeypatch.setattr(timed_block, "harness_budget_bytes", lambda state: 1)
    reply = time_block(state, wdata)
    assert reply.slots == 1 and "timed_inputs_single_slot" in reply.flags, reply.flags
    assert len(reply.sampled) >= 1


def test_fresh_timed_blocks_keep_only_the_first_timed_set_cached(loaded):
    state, wdata = loaded
    assert {11, 12} <= set(state.inputs_cache)
    time_block(state, wdata)
    assert set(state.inputs_cache) == {21}  # trials' inputs and the second timed set dropped


def test_trim_drops_a_large_cache_and_keeps_a_small_one(loaded, monkeypatch):
    state, wdata = loaded
    held = sum(a.numel() * a.element_size() for entry in state.inputs_cache.values() for a in entry[2])
    assert held > 0
    assert inputs_cache.handle_trim(state, msg.Trim()) == msg.Trimmed(freed_bytes=0, held_bytes=held)
    assert len(state.inputs_cache) == 2
    monkeypatch.setattr(inputs_cache, "trim_threshold_bytes", lambda state: held - 1)
    assert inputs_cache.handle_trim(state, msg.Trim()) == msg.Trimmed(freed_bytes=held, held_bytes=0)
    assert state.inputs_cache == {}
    assert isinstance(calls.handle_call(state, msg.Call(workload=wdata, seed=11)), msg.Called)  # rebuilt from the seed


def test_trim_in_real_workers(tmp_path):
    problem = load_problem(write_problem(tmp_path / "p", sizes=(64,)))
    wdata = problem.workloads[0]
    session = DeviceSession("cpu", RunConfig(device="cpu"))
    try:
        session.load(session.reference, problem, reference_solution(problem.definition))
        solution = load_solution(write_solution(tmp_path, GOOD), problem.definition)
        session.load(session.candidate, problem, solution)
        for seed in (1, 2):
            session.ask(session.candidate, msg.Call(workload=wdata, seed=seed), 60)
        kept = session.ask(session.candidate, msg.Trim(), 60)
        assert kept.freed_bytes == 0 and kept.held_bytes == 2 * 2 * 64 * 4  # two sets of x, y
        freed = session.ask(session.candidate, msg.Trim(min_bytes=1000), 60)
        assert freed.freed_bytes == 2 * 2 * 64 * 4 and freed.held_bytes == 0
        assert session.ask(session.candidate, msg.Trim(min_bytes=0), 60).held_bytes == 0
        reply = session.ask(session.candidate, msg.Call(workload=wdata, seed=1), 60)
        assert reply.outputs[0].shape == (64,)
    finally:
        session.close()


def evaluate_recording_requests(tmp_path, monkeypatch) -> list[tuple[str, str]]:
    """A passing CPU evaluation in which every input set counts as large; the (worker, op) of each request."""
    problem_dir = write_problem(tmp_path / "p", sizes=(64,))
    solution = write_solution(tmp_path, GOOD)
    monkeypatch.setattr(session_module, "TRIM_MIN_SET_BYTES", 0)
    asked: list[tuple[str, str]] = []
    original = DeviceSession.ask

    def recording(self, worker, message, timeout_s):
        asked.append(("solution" if worker is self.candidate else "reference", message.OP))
        return original(self, worker, message, timeout_s)

    monkeypatch.setattr(DeviceSession, "ask", recording)
    config = RunConfig(device="cpu", trials=2, warmup=1, iters=3, adaptive=False, timing_rounds=1, timeout_s=60)
    traces = api.evaluate(problem_dir, solution, config=config)
    assert [t.status for t in traces] == [Status.PASSED], traces[0].evaluation.log
    return asked


def test_evaluation_asks_the_idle_worker_to_trim_and_still_passes(tmp_path, monkeypatch):
    asked = evaluate_recording_requests(tmp_path, monkeypatch)
    timed = [i for i, entry in enumerate(asked) if entry[1] == "time"]
    assert [asked[i] for i in timed] == [("reference", "time"), ("solution", "time")]
    assert [asked[i - 1] for i in timed] == [("solution", "trim"), ("reference", "trim")]


def test_small_inputs_are_not_worth_a_trim_request(tmp_path):
    problem = load_problem(write_problem(tmp_path / "p", sizes=(64,)))
    set_bytes = declared_set_bytes(problem, problem.workloads[0])
    assert set_bytes == 2 * 64 * 4
    session = DeviceSession("cpu", RunConfig(device="cpu"))  # no worker is started
    sent: list[dict] = []
    session.ask = lambda worker, message, timeout_s: sent.append(message)
    idle = SimpleNamespace(alive=True)
    session.trim(idle, set_bytes)
    assert sent == []
    session.trim(idle, session_module.TRIM_MIN_SET_BYTES)
    assert sent == [msg.Trim()]


def test_trials_keep_one_workers_large_inputs_on_the_device_at_a_time(tmp_path, monkeypatch):
    # Two workers each holding a 21 GiB set and a copy of it do not fit on an 80 GB GPU: before a
    # solution's call the reference worker drops its cache, and before judging the solution's does.
    asked = evaluate_recording_requests(tmp_path, monkeypatch)
    calls = [i for i, entry in enumerate(asked) if entry == ("solution", "call")]
    judges = [i for i, entry in enumerate(asked) if entry == ("reference", "judge")]
    assert len(calls) == 2 and len(judges) >= 2
    assert all(asked[i - 1] == ("reference", "trim") for i in calls)
    assert all(asked[i - 1] == ("solution", "trim") for i in judges[:2])  # the two trials
    timed = asked.index(("solution", "time"))
    assert len(judges) > 2 and asked[judges[2] - 1] == ("solution", "trim") and judges[2] > timed  # sampled outputs


def record_generation(monkeypatch, state, fail_first_with: Exception | None = None) -> list[int]:
    """Wrap input generation: record how many sets the cache held at each build; optionally fail once."""
    held: list[int] = []
    original = inputs_cache.make_inputs

    def wrapped(*args, **kwargs):
        held.append(len(state.inputs_cache))
        if fail_first_with is not None and len(held) == 1:
            raise fail_first_with
        return original(*args, **kwargs)

    monkeypatch.setattr(inputs_cache, "make_inputs", wrapped)
    return held


def test_the_cache_makes_room_before_building_the_next_set(loaded, monkeypatch):
    state, wdata = loaded
    set_bytes = 2 * 64 * 4
    monkeypatch.setattr(inputs_cache, "cache_budget_bytes", lambda state: set_bytes * 2)
    held = record_generation(monkeypatch, state)
    assert set(state.inputs_cache) == {11, 12}
    inputs_cache.make_call_inputs(state, wdata, 13)
    assert held == [0] and set(state.inputs_cache) == {13}  # emptied before the build, not after
    inputs_cache.make_call_inputs(state, wdata, 14)
    assert held == [0, 1] and set(state.inputs_cache) == {13, 14}  # two sets fit the budget


def test_out_of_memory_while_building_retries_once_without_the_cache(loaded, monkeypatch):
    state, wdata = loaded
    held = record_generation(monkeypatch, state, torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 7.00 GiB"))
    _, _, args = inputs_cache.make_call_inputs(state, wdata, 13)
    assert held == [2, 0] and set(state.inputs_cache) == {13} and args[0].shape == (64,)


def test_out_of_memory_with_nothing_cached_is_a_clear_failure(loaded, monkeypatch):
    state, wdata = loaded
    state.inputs_cache.clear()
    record_generation(monkeypatch, state, torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 7.00 GiB"))
    with pytest.raises(Failure) as failure:
        inputs_cache.make_call_inputs(state, wdata, 13)
    assert failure.value.status == "INVALID_REFERENCE" and "out of memory" in str(failure.value)


def test_a_large_fresh_template_is_not_kept_while_timing(loaded, monkeypatch):
    # Calls draw their own inputs; the first timed set only shapes the slots. Above the trim threshold
    # it is dropped (a 21 GiB template beside the slot and the fresh sets does not fit on 80 GB).
    state, wdata = loaded
    monkeypatch.setattr(timed_block, "trim_threshold_bytes", lambda state: 0)
    reply = time_block(state, wdata)
    assert isinstance(reply, msg.Timed) and reply.sampled and state.inputs_cache == {}


def test_a_failed_graph_capture_restarts_the_worker_and_times_again_as_launched(monkeypatch):
    # On an H100 a failed capture left the worker's CUDA RNG in capture mode and 51 GB of graph pool
    # behind, and the next problems failed in that process: it is restarted, the block timed again.
    session = DeviceSession("cpu", RunConfig(device="cpu"))  # no worker is started
    sent, events = [], []
    replies = iter([StepFailed(Status.RUNTIME_ERROR, "CUDA graph capture failed: not captured (x); timed as launched\n",
                               capture_failed="not captured (x); timed as launched"),
                    msg.Timed(samples_ms=[2.0], warmup=0, wall_s=0.1, sampled=[], flags=["launch_bound"]),
                    msg.Timed(samples_ms=[3.0], warmup=0, wall_s=0.1, sampled=[])])

    def ask(worker, message, timeout_s):
        sent.append(message.config.cuda_graphs)
        reply = next(replies)
        if isinstance(reply, Exception):
            raise reply
        return reply

    session.ask = ask
    session.retire = lambda worker: events.append(("retire", worker is session.candidate))
    monkeypatch.setattr(type(session.candidate), "alive", property(lambda self: True))  # not retired by the fake ask
    session.load = lambda worker, problem, solution: events.append(("load", worker is session.candidate, problem, solution))
    session._loaded[id(session.candidate)] = (("p", "hash", 1), False)
    session.candidate_job = ("problem", "solution")
    message = msg.Time(workload={}, seeds=[1], config=TimingConfig(cuda_graphs=True))
    reply = session.ask_timed(session.candidate, message, 60)
    assert sent == [True, False] and events == [("retire", True), ("load", True, "problem", "solution")]
    assert reply.samples_ms == [2.0] and reply.graph_note.startswith("not captured")
    assert "cuda_graph_unavailable" in reply.flags and "launch_bound" in reply.flags
    again = session.ask_timed(session.candidate, message, 60)  # the same code: not captured again
    assert sent == [True, False, False] and again.samples_ms == [3.0] and len(events) == 2


def _spy_draws(monkeypatch) -> list[int]:
    drawn: list[int] = []
    original = timed_block.make_call_inputs

    def make_call_inputs(state, workload, seed, **kwargs):
        drawn.append(seed)
        return original(state, workload, seed, **kwargs)

    monkeypatch.setattr(timed_block, "make_call_inputs", make_call_inputs)
    monkeypatch.setattr(timed_draws, "make_call_inputs", make_call_inputs)  # call 0's set, drawn in setup
    return drawn


def test_on_cpu_the_first_calls_fresh_set_decides_the_seed_check_and_no_second_set_is_drawn(loaded, monkeypatch):
    """Whether inputs depend on the seed is seen by comparing the first timed set with call 0's own fresh
    set (drawn in setup, then used by call 0): one draw per call, and none only for the check."""
    state, wdata = loaded
    drawn = _spy_draws(monkeypatch)
    reply = time_block(state, wdata)
    assert "timed_inputs_fixed" not in reply.flags and 22 not in drawn and drawn.count(21) == 1
    fresh = [s for s in drawn if s != 21]
    # warm-up and timed calls, each its own set (warm-up lasts at least min_warmup_ms: more calls on a
    # fast machine, so the count comes from the reply, never from a fixed number)
    assert len(fresh) == len(set(fresh)) == reply.warmup + len(reply.samples_ms) == reply.warmup + 6
    seeds = [timed_call_seed(entry, 0, [21, 22]) for entry in reply.sampled]  # as the orchestrator derives them
    assert reply.sampled and all(seed in fresh for seed in seeds)
    for seed, entry in zip(seeds, reply.sampled):  # each kept output belongs to the set its seed rebuilds
        outputs = entry[3]
        x, y = calls.make_call_inputs(state, wdata, seed)[2]
        assert torch.equal(outputs[0], x * 2.0 + y)


def test_inputs_that_ignore_the_seed_still_rotate_the_requested_sets(tmp_path, monkeypatch):
    folder = write_problem(tmp_path / "p", sizes=(64,))
    workload = {"uuid": "w0-64", "axes": {"n": 64}, "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5},
                "inputs": {"x": {"type": "scalar", "value": 1.5}, "y": {"type": "scalar", "value": -2.0}}}
    (folder / "workload.jsonl").write_text(json.dumps(workload) + "\n")
    problem = load_problem(folder)
    solution = load_solution(write_solution(tmp_path, GOOD), problem.definition)
    monkeypatch.setattr(timed_block, "background_activity", lambda state: None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    state = WorkerState("cpu")
    calls.handle_load(state, msg.Load(definition=problem.definition, solution=solution,
                                      work_dir=str(tmp_path / "w")))
    drawn = _spy_draws(monkeypatch)
    reply = time_block(state, problem.workloads[0])
    assert "timed_inputs_fixed" in reply.flags and {21, 22} <= set(drawn)
    assert all(entry[2] is None and timed_call_seed(entry, 0, [21, 22]) in (21, 22) for entry in reply.sampled)
