"""The worker process: loads one solution (or the reference) and runs it on request.

Started by `solbench.runner.process.WorkerProcess`; talks only over the inherited channel fd.
Everything the harness needs from torch, time and threading is bound here before any solution code
is imported. The worker never receives reference outputs: it regenerates its inputs from seeds and
sends its outputs back for the orchestrator to judge.
"""

from __future__ import annotations

import gc
import os
from multiprocessing.connection import Connection

from solbench.runner.worker_calls import (
    handle_call,
    handle_fetch,
    handle_inputs,
    handle_judge,
    handle_load,
    handle_receive,
    handle_release,
    handle_trim,
)
from solbench.runner.worker_state import Failure, WorkerState, format_exception
from solbench.runner.worker_timing import (
    handle_time_and_export,
    handle_time_baseline,
    handle_time_compiled,
)


def handle_environment(state: WorkerState, message: dict) -> dict:
    from solbench.runner.environment import collect_environment

    return {"ok": True, "environment": collect_environment(state.device)}


def send_reply(channel: Connection, reply: dict, request_id) -> None:
    """Replies travel in the wire format (JSON + raw tensor bytes), tagged with the request id."""
    from solbench.runner import wire

    reply["id"] = request_id
    try:
        wire.send(channel, reply)
    except (TypeError, ValueError) as exc:  # e.g. an object JSON cannot hold
        wire.send(channel, {"ok": False, "status": "RUNTIME_ERROR", "id": request_id,
                            "log": f"the reply could not be encoded: {type(exc).__name__}: {exc}"})


HANDLERS = {"load": handle_load, "call": handle_call, "judge": handle_judge, "time": handle_time_and_export,
            "time_compiled": handle_time_compiled,
            "time_baseline": handle_time_baseline,
            "environment": handle_environment,
            "receive": handle_receive, "release": handle_release, "fetch": handle_fetch, "trim": handle_trim,
            "inputs": handle_inputs}


PHASES = {"load": "load", "call": "call", "time": "timing"}


def start_guard(state: WorkerState, alarm_fd: str | None):
    """Import every harness module a request may use, snapshot them, install the audit hook.

    Runs before any solution code: what the snapshot holds is what the harness was.
    """
    import importlib

    from solbench.check import worker_guard

    for name in ("solbench.timing.timer", "solbench.timing.config", "solbench.timing.stats", "solbench.check.outputs",
                 "solbench.check.anticheat", "solbench.inputs", "solbench.inputs.generate", "solbench.inputs.custom",
                 "solbench.inputs.errors", "solbench.runner.languages", "solbench.runner.languages.python_module",
                 "solbench.runner.languages.cuda_extension", "solbench.runner.environment", "solbench.runner.wire",
                 "solbench.runner.transfer", "solbench.check.cupti_activity",
                 "solbench.spec.definition", "solbench.spec.solution", "solbench.spec.workload"):
        importlib.import_module(name)
    import solbench.timing.timer as timer

    if state.is_cuda:
        from solbench.check.cupti_activity import load_cupti

        load_cupti()  # bound now, so a solution cannot slip a fake `cupti` module in first
    from solbench.runner.transfer import bind_driver

    bind_driver(state)  # libcuda for CUDA IPC of large outputs, loaded before the audit hook
    if state.is_cuda:
        # pynvml loads libnvidia-ml and looks up each function on first use (ctypes dlopen / dlsym):
        # one full reading now, so the timer's readings later raise no audit events.
        timer.telemetry_for(timer.resolve_device(state.device).index).read()
    checker = worker_guard.make_checker(worker_guard.take_snapshot(
        {"HANDLERS": HANDLERS, "solbench.timing.timer._CAPTURED": timer._CAPTURED}))
    guard = worker_guard.GuardState()
    guard.protect(worker_guard.installation_roots())
    worker_guard.install_audit_hook(int(alarm_fd) if alarm_fd else None, guard)
    state.guard = guard
    return guard, checker


def handle_ping(state: WorkerState, message: dict) -> dict:
    """Answered only when every earlier reply has gone out: the orchestrator's sequence check."""
    return {"ok": True}


HANDLERS["ping"] = handle_ping


def main() -> None:
    channel = Connection(int(os.environ["SOLBENCH_CHANNEL_FD"]))
    os.environ.pop("SOLBENCH_CHANNEL_FD", None)
    alarm_fd = os.environ.pop("SOLBENCH_ALARM_FD", None)
    from solbench.runner import wire

    state = WorkerState(os.environ.get("SOLBENCH_WORKER_DEVICE", "cpu"))
    import solbench.timing.timer  # noqa: F401  (binds the timing functions before solution code runs)

    guard, integrity = start_guard(state, alarm_fd)
    while True:
        try:
            message = wire.recv(channel)
        except (EOFError, OSError):
            return
        op = message.get("op")
        if op == "shutdown":
            send_reply(channel, {"ok": True}, message.get("id"))
            return
        gc.collect()
        guard.phase = PHASES.get(op, "idle")
        try:
            reply = HANDLERS[op](state, message)
        except Failure as failure:
            reply = {"ok": False, "status": failure.status, "log": str(failure)}
        except Exception as exc:  # noqa: BLE001 - harness bug or hostile code: report, keep serving
            reply = {"ok": False, "status": "RUNTIME_ERROR", "log": format_exception(exc)}
        guard.phase = "idle"
        changed = integrity()
        if changed:
            reply = {"ok": False, "status": "REWARD_HACK",
                     "log": f"harness objects were replaced in the solution's process: {changed}"}
        reply["audit"] = guard.take_warnings()
        if state.is_cuda:
            state.torch.cuda.empty_cache()
        send_reply(channel, reply, message.get("id"))


if __name__ == "__main__":
    main()
