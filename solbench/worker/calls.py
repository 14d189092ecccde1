"""Worker requests around one call: loading a solution, a correctness trial, judging (in the reference
worker) and building a workload's inputs for the orchestrator's blame checks.

Harness primitives are bound at import, before any solution code is loaded (see `main.start_guard`).
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from pathlib import Path

import torch

from solbench import languages
from solbench.check.correctness import check_outputs
from solbench.check.outputs import LazyContainer, normalize_outputs, returned_views, structural_check
from solbench.inputs.generate import allocate_outputs
from solbench.protocol import messages as msg
from solbench.protocol.descriptors import is_received
from solbench.spec.solution import Solution, shadowing_sources
from solbench.timing.timer import integrity_violations
from solbench.worker import reads, transfer
from solbench.worker.guard import installation_roots
from solbench.worker.inputs_cache import changed_tensors, make_call_inputs
from solbench.worker.state import Failure, WorkerState, format_exception, harness_native
from solbench.worker.threads import baseline_threads

_perf_counter = time.perf_counter


def handle_load(state: WorkerState, request: msg.Load) -> msg.Loaded:
    state.definition = request.definition
    state.timed_block, state.timed_call_ms = None, 0.0  # another solution: nothing timed before carries over
    solution = request.solution
    if not reads.covers(request.readable_roots):  # the orchestrator starts a fresh process for other roots
        raise Failure("RUNTIME_ERROR", "this worker's read rules do not cover the problem's data roots")
    with harness_native(state):
        unenforced = reads.restrict_for_load(request.readable_roots)  # before the reference or the solution runs
    if unenforced and state.guard is not None:
        state.guard.note(unenforced)
    state.data_roots = [Path(p) for p in request.data_roots]
    if state.guard is not None:  # the audit hook reports writes below these (and the harness package)
        state.guard.protect([str(p) for p in state.data_roots] + installation_roots())
    shadowing = shadowing_sources([s.path for s in solution.sources])
    if shadowing:
        raise Failure("REWARD_HACK", f"source files would shadow the standard library or the harness: {shadowing}")
    source_dir = Path(request.work_dir) / "src"
    source_dir.mkdir(parents=True, exist_ok=True)
    for source in solution.sources:
        target = source_dir / source.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.content)
    state.source_dir = source_dir
    state.reference_module = load_reference_module(state.definition.reference)
    state.baselines = {}
    state.function = load_function(state, solution, source_dir, request.compile_timeout_s)
    state.destination_passing = solution.spec.destination_passing_style
    violations = integrity_violations()
    if violations:
        raise Failure("REWARD_HACK", f"harness functions were replaced while loading the solution: {violations}")
    return msg.Loaded()


def load_function(state: WorkerState, solution: Solution, source_dir: Path, timeout_s: float):
    """The solution's entry point, loaded by its language; SKIPPED where this device cannot judge it."""
    try:
        language = languages.for_solution(solution)
        capability = torch.cuda.get_device_capability(state.device) if state.is_cuda else None
        reason = language.refusal(state.definition.dtypes(), state.is_cuda, capability)
        if reason:
            raise languages.LoadError(reason, "SKIPPED")
        return language.load(solution, source_dir, state.device, timeout_s)
    except languages.LoadError as exc:
        raise Failure(exc.status, str(exc)) from None


def load_reference_module(source: str):
    """The reference as a module (needed for custom input entrypoints), from a real file."""
    folder = Path(tempfile.mkdtemp(prefix="solbench_ref_"))
    path = folder / "solbench_reference.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("solbench_reference", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001
        raise Failure("INVALID_REFERENCE", f"the reference does not import: {type(exc).__name__}: {exc}") from None
    return module


def handle_inputs(state: WorkerState, request: msg.Inputs) -> msg.InputsBuilt:
    """In the reference worker: build a workload's inputs for a seed (a failure is the reference's);
    with `run`, also run the reference on them (can this GPU run the problem at all?)."""
    _, _, args = make_call_inputs(state, request.workload, request.seed, fresh_copy=request.run,
                                  profile=request.profile)
    if request.run:
        try:
            invoke(state, args, None)
            state.synchronize()
        except Exception as exc:  # noqa: BLE001
            raise Failure("INVALID_REFERENCE", "the reference raised:\n" + format_exception(exc)) from None
    return msg.InputsBuilt()


def invoke(state: WorkerState, args: list, outputs: list | None):
    if outputs is not None:
        state.function(*args, *outputs)
        return outputs
    return state.function(*args)


def handle_call(state: WorkerState, request: msg.Call) -> msg.Called:
    """One correctness trial: fresh inputs from the seed, one call, outputs back to the judge."""
    with harness_native(state):
        transfer.release_all(state)
    workload, axes, args = make_call_inputs(state, request.workload, request.seed, profile=request.profile)
    pristine = state.inputs_cache[request.seed][2]  # the cached originals: args are copies of them
    outputs = allocate_outputs(state.definition, axes, state.device) if state.destination_passing else None
    started = _perf_counter()
    try:
        result = invoke(state, args, outputs)
        state.synchronize()
    except torch.cuda.OutOfMemoryError as exc:
        raise Failure("RUNTIME_ERROR", f"out of memory: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the solution's own failure
        raise Failure("RUNTIME_ERROR", "the solution raised:\n" + format_exception(exc)) from None
    call_s = _perf_counter() - started
    if outputs is None:
        try:
            result = normalize_outputs(result, state.definition, axes)
        except LazyContainer as exc:
            raise Failure("REWARD_HACK", str(exc)) from None
        except Exception as exc:  # noqa: BLE001
            raise Failure("INCORRECT_SHAPE", f"outputs could not be matched to the definition: {exc}") from None
    status, text = structural_check(result, state.definition, axes)
    if status is not None:
        raise Failure(str(status), text)
    names = list(state.definition.inputs)
    aliases = returned_views(result, state.definition, args)
    mutated = [names[i] for i in changed_tensors(pristine, args)]
    if state.baseline_threads is None:
        state.baseline_threads = baseline_threads()
    # Whether writing into inputs or returning them is acceptable depends on what the reference
    # does; the orchestrator decides once it knows (see orchestrator.trials.side_effects).
    # Large GPU outputs go to the reference worker as CUDA IPC handles of copies (transfer.py) when asked.
    with harness_native(state):
        outputs = transfer.export_outputs(state, list(result), request.ipc_min_bytes, copy=True)
    return msg.Called(outputs=outputs, call_s=call_s, aliased_inputs=aliases, mutated_inputs=mutated)


def handle_judge(state: WorkerState, request: msg.Judge) -> msg.Judged:
    """In the reference worker: run the reference on the seed's inputs and judge the given outputs."""
    try:
        return judge_outputs(state, request)
    finally:
        transfer.forget_received(state)  # copies a `receive` made are used by this judge or by none


def judge_outputs(state: WorkerState, request: msg.Judge) -> msg.Judged:
    started = _perf_counter()
    workload, axes, args = make_call_inputs(state, request.workload, request.seed, profile=request.profile)
    pristine = state.inputs_cache[request.seed][2]  # the cached originals: args are copies of them
    state.synchronize()
    built = _perf_counter()
    try:
        reference = normalize_outputs(invoke(state, args, None), state.definition, axes)
        state.synchronize()
    except Exception as exc:  # noqa: BLE001
        raise Failure("INVALID_REFERENCE", "the reference raised:\n" + format_exception(exc)) from None
    ran = _perf_counter()
    names = list(state.definition.inputs)
    aliases = returned_views(reference, state.definition, args)
    mutated = [names[i] for i in changed_tensors(pristine, args)]
    del args
    candidate = [transfer.take_received(state, o) if is_received(o)
                 else o.to(state.device) if isinstance(o, torch.Tensor) else o for o in request.outputs]
    status, correctness = check_outputs(candidate, reference, state.definition, workload.tolerance, axes,
                                        strict=request.strict)
    phases = {"inputs": built - started, "reference": ran - built, "compare": _perf_counter() - ran}
    return msg.Judged(status=status.value, correctness=correctness, aliased_inputs=aliases,
                      mutated_inputs=mutated, phases_s=phases)


def as_list(result) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def refill_outputs(outputs: list) -> None:
    """Poison destination buffers before a call, so a call that skips writing them cannot pass."""
    for o in outputs:
        if isinstance(o, torch.Tensor):
            if o.is_floating_point():
                o.fill_(float("nan"))
            elif o.dtype != torch.bool:
                o.fill_(torch.iinfo(o.dtype).min if o.dtype != torch.uint8 else 255)
