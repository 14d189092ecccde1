"""Baselines timed in the reference worker: `torch.compile` of the reference, and the optimised baseline
shipped with a problem (trusted problem code, like the reference).

Each must agree with the eager reference on the first timed input set, under the workload's tolerance,
before it is timed: a baseline that changes the answer is not a baseline.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from solbench.check.correctness import check_outputs
from solbench.check.outputs import normalize_outputs
from solbench.inputs.generate import allocate_outputs
from solbench.protocol import messages as msg
from solbench.worker.calls import load_function
from solbench.worker.inputs_cache import make_call_inputs
from solbench.worker.state import Failure, WorkerState, format_exception
from solbench.worker.timed_block import handle_time


def handle_time_compiled(state: WorkerState, request: msg.TimeCompiled) -> msg.Timed:
    """A timed block of `torch.compile` of the reference."""
    eager = state.function
    if state.compiled is None or state.compiled[0] is not eager:
        state.compiled = (eager, torch.compile(eager))
    compiled = state.compiled[1]
    workload, axes, args = make_call_inputs(state, request.workload, request.seeds[0])
    try:
        expected = normalize_outputs(eager(*args), state.definition, axes)
        got = normalize_outputs(compiled(*make_call_inputs(state, request.workload, request.seeds[0])[2]),
                                state.definition, axes)
        state.synchronize()
    except Exception as exc:  # noqa: BLE001 - compilation is allowed to fail: then there is no such baseline
        raise Failure("RUNTIME_ERROR", "torch.compile of the reference failed:\n" + format_exception(exc)) from None
    status, correctness = check_outputs(got, expected, state.definition, workload.tolerance, axes)
    if status.value != "PASSED":
        raise Failure("INCORRECT_NUMERICAL", f"torch.compile of the reference disagrees with it: {correctness.message}")
    state.function = compiled
    try:
        return handle_time(state, request)
    finally:
        state.function = eager


def handle_time_baseline(state: WorkerState, request: msg.TimeBaseline) -> msg.Timed:
    """A timed block of the optimised baseline shipped with the problem
    (`solbench.spec.problem.find_baseline`)."""
    solution = request.baseline
    key = solution.content_hash()
    if key not in state.baselines:
        folder = Path(tempfile.mkdtemp(prefix="solbench_baseline_"))
        for source in solution.sources:
            (folder / source.path).write_text(source.content)
        state.baselines[key] = load_function(state, solution, folder, request.compile_timeout_s)
    baseline, dps = state.baselines[key], solution.spec.destination_passing_style
    eager, eager_dps = state.function, state.destination_passing
    workload, axes, args = make_call_inputs(state, request.workload, request.seeds[0])
    try:
        expected = normalize_outputs(eager(*args), state.definition, axes)
        args = make_call_inputs(state, request.workload, request.seeds[0])[2]
        outputs = allocate_outputs(state.definition, axes, state.device) if dps else None
        result = baseline(*args, *outputs) if dps else baseline(*args)
        got = normalize_outputs(outputs if dps else result, state.definition, axes)
        state.synchronize()
    except Exception as exc:  # noqa: BLE001 - then there is no such baseline, and the run says why
        raise Failure("RUNTIME_ERROR", "the shipped baseline raised:\n" + format_exception(exc)) from None
    status, correctness = check_outputs(got, expected, state.definition, workload.tolerance, axes)
    if status.value != "PASSED":
        raise Failure("INCORRECT_NUMERICAL", f"the shipped baseline disagrees with the reference: {correctness.message}")
    state.function, state.destination_passing = baseline, dps
    try:
        return handle_time(state, request)
    finally:
        state.function, state.destination_passing = eager, eager_dps
