"""The worker's main loop: decode a request, run its handler, send the typed reply.

Everything the harness needs from torch, time and threading is bound at import of this package,
before any solution code is imported; then the guard snapshots the harness and installs the audit hook
(`start_guard`). The worker never receives reference outputs: it regenerates its inputs from seeds and
sends its outputs back for the orchestrator to judge.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

import torch

from solbench import languages
from solbench.protocol import codec, framing
from solbench.protocol import messages as msg
from solbench.spec.trace import Environment as EnvironmentRecord
from solbench.timing import timer
from solbench.worker import guard as worker_guard
from solbench.worker.baselines import handle_time_baseline, handle_time_compiled
from solbench.worker.calls import handle_call, handle_inputs, handle_judge, handle_load
from solbench.worker.cupti_activity import load_cupti
from solbench.worker.environment import collect_environment
from solbench.worker.hooks import make_dispatch_checker
from solbench.worker.inputs_cache import handle_trim
from solbench.worker.state import Failure, WorkerState, format_exception
from solbench.worker.timed_block import handle_time_and_export
from solbench.worker.transfer import bind_driver, handle_fetch, handle_receive, handle_release

_perf_counter = time.perf_counter


def handle_environment(state: WorkerState, request: msg.Environment) -> msg.EnvironmentRead:
    return msg.EnvironmentRead(environment=EnvironmentRecord.from_dict(collect_environment(state.device)))


def handle_ping(state: WorkerState, request: msg.Ping) -> msg.Pong:
    """Answered only when every earlier reply has gone out: the orchestrator's sequence check."""
    return msg.Pong()


HANDLERS: dict[str, Callable] = {
    "load": handle_load, "call": handle_call, "judge": handle_judge, "inputs": handle_inputs,
    "time": handle_time_and_export, "time_compiled": handle_time_compiled, "time_baseline": handle_time_baseline,
    "environment": handle_environment, "receive": handle_receive, "release": handle_release,
    "fetch": handle_fetch, "trim": handle_trim, "ping": handle_ping,
}
assert set(HANDLERS) | {"shutdown"} == set(msg.REQUESTS), "every request op has a handler"

# The guard's phase while a request runs: the audit hook is strictest while the solution is timed.
PHASES = {"load": "load", "call": "call", "time": "timing"}
# Requests after which the worker hands its cached device memory back (the other worker of the GPU may
# need it): the ones that allocate a lot. Every small request paid for this and a garbage collection
# before (a third of the harness's time on short workloads, benchmarks/throughput.py).
RELEASE_AFTER = frozenset({"load", "time", "time_compiled", "time_baseline", "trim"})
# After any other request, an unused cache this large goes back too: a reference's temporaries in a judge
# (30 GiB for L1/026 on an H100), or a solution's exported copies of large outputs once released (the
# reference worker holds its own: Quant/023's two 16 GiB outputs on an H100), kept, left the other worker
# too little memory. Memory in use (the cached inputs, a problem's weights) cannot go back: counting it
# (as before 2026-11-30) emptied the cache after every request of a problem with 2 GiB of weights, and
# the next request allocated it again (2.1 s of 82 in issue 15's set on an H200).
KEEP_UNUSED_BYTES = 2 << 30
# Requests after which the integrity snapshot is compared: those that run loaded code (the solution's, the
# reference's, a baseline's) or whose reply carries what a verdict rests on. After the others (a release,
# a ping, a trim, a receive: their replies carry nothing judged) a change made meanwhile, by a thread the
# solution left running, is still there for the next checked request to find before any verdict uses what
# it touched. After every request it took 2.5-2.7 s per GPU worker of an 82 s run of issue 15's set on an
# H200 (a sampling profile), against 0.8 ms a comparison on a CPU machine without the audit hook installed.
CHECKED_AFTER = frozenset({"load", "call", "judge", "inputs", "time", "time_compiled", "time_baseline", "fetch",
                           "environment"})


def start_guard(state: WorkerState, alarm_fd: str | None):
    """Bind what requests use, snapshot the harness, install the audit hook.

    Runs before any solution code: what the snapshot holds is what the harness was. Every harness module
    a request may use is imported by this module already; the language modules are found here.
    """
    languages.known()  # every language module imported now, not by a solution's load
    if state.is_cuda:
        load_cupti()  # bound now, so a solution cannot slip a fake `cupti` module in first
    bind_driver(state)  # libcuda for CUDA IPC of large outputs, loaded before the audit hook
    if state.is_cuda:
        # pynvml loads libnvidia-ml and looks up each function on first use (ctypes dlopen / dlsym):
        # one full reading now, so the timer's readings later raise no audit events.
        timer.telemetry_for(timer.resolve_device(state.device).index).read()
    harness = worker_guard.make_checker(worker_guard.take_snapshot(
        {"HANDLERS": HANDLERS, "solbench.timing.timer._CAPTURED": timer._CAPTURED}))
    dispatcher = make_dispatch_checker()

    def checker(_harness=harness, _dispatcher=dispatcher) -> list[str]:
        return _harness() + _dispatcher()

    guard = worker_guard.GuardState()
    guard.protect(worker_guard.installation_roots())
    worker_guard.install_audit_hook(int(alarm_fd) if alarm_fd else None, guard)
    state.guard = guard
    return guard, checker


def send_reply(channel: Connection, reply: msg.Reply, request_id: int | None, op: str) -> None:
    """Replies travel in the wire format (JSON + raw tensor bytes), tagged with the request id."""
    try:
        framing.send(channel, codec.encode(reply, request_id, op))
    except (TypeError, ValueError) as exc:  # e.g. an object JSON cannot hold
        failed = msg.Failed(status="RUNTIME_ERROR", log=f"the reply could not be encoded: {type(exc).__name__}: {exc}")
        framing.send(channel, codec.encode(failed, request_id, op))


def serve_one(state: WorkerState, guard, integrity, request: msg.Request) -> msg.Reply:
    """Run one request's handler; every failure becomes a `Failed` reply."""
    guard.phase = PHASES.get(request.OP, "idle")
    started = _perf_counter()
    try:
        reply = HANDLERS[request.OP](state, request)
    except Failure as failure:
        reply = msg.Failed(status=failure.status, log=str(failure), capture_failed=failure.capture_failed)
    except Exception as exc:  # noqa: BLE001 - harness bug or hostile code: report, keep serving
        reply = msg.Failed(status="RUNTIME_ERROR", log=format_exception(exc))
    guard.phase = "idle"
    finishing = _perf_counter()
    changed = integrity() if request.OP in CHECKED_AFTER else []
    if changed:
        reply = msg.Failed(status="REWARD_HACK", log=f"harness objects were replaced or hooked in the solution's "
                                                      f"process: {changed}")
    reply.audit = guard.take_warnings()
    if state.is_cuda and (request.OP in RELEASE_AFTER or unused_cache_bytes() > KEEP_UNUSED_BYTES):
        torch.cuda.empty_cache()  # before the reply: the other worker may be timed next, beside this one
    reply.handler_s = _perf_counter() - started
    if isinstance(reply, msg.Timed):  # a block's account ends with the process's own checks and memory release
        reply.phases_s["release"] = round(_perf_counter() - finishing, 4)
    return reply


def unused_cache_bytes() -> int:
    """Device memory torch's allocator holds for this process without a tensor in it (one reading of the
    allocator's statistics: `memory_reserved` and `memory_allocated` would each take one)."""
    stats = torch.cuda.memory_stats()
    return stats.get("reserved_bytes.all.current", 0) - stats.get("allocated_bytes.all.current", 0)


def release_memory(state: WorkerState, request: msg.Request) -> None:
    """After the reply to a `load` went out: collect the cyclic garbage of the code it replaced. Nowhere
    else: a collection costs milliseconds that the next request would wait for (the timer turns the
    collector off inside timed loops; Python collects on its own between them). The harness itself is
    frozen out of it (`main`)."""
    if request.OP == "load":
        gc.collect()


def main() -> None:
    channel = Connection(int(os.environ["SOLBENCH_CHANNEL_FD"]))
    os.environ.pop("SOLBENCH_CHANNEL_FD", None)
    alarm_fd = os.environ.pop("SOLBENCH_ALARM_FD", None)
    state = WorkerState(os.environ.get("SOLBENCH_WORKER_DEVICE", "cpu"))
    guard, integrity = start_guard(state, alarm_fd)
    # What exists now is the harness, torch and triton (about 180,000 objects, none of them garbage): out of
    # the collector's reach, so a collection looks at what requests made (the one after each load cost
    # 70-90 ms per problem, paid by the next request, in both workers).
    gc.freeze()
    while True:
        try:
            data = framing.recv(channel)
        except (EOFError, OSError):
            return
        try:
            request_id, request = codec.decode_request(data)
        except codec.ProtocolError as exc:  # the orchestrator never writes this: a harness bug, said plainly
            op = data.get("op") if type(data) is dict and type(data.get("op")) is str else "unknown"
            send_reply(channel, msg.Failed(status="RUNTIME_ERROR", log=f"protocol error in a request: {exc}"),
                       data.get("id") if type(data) is dict else None, op)
            continue
        if isinstance(request, msg.Shutdown):
            send_reply(channel, msg.Stopped(), request_id, request.OP)
            return
        send_reply(channel, serve_one(state, guard, integrity, request), request_id, request.OP)
        release_memory(state, request)
