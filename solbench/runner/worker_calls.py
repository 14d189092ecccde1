"""Worker requests around one call: loading a solution, inputs from seeds, a correctness trial,
judging (in the reference worker) and the CUDA IPC transfer requests.

Harness primitives are bound at import, before any solution code is loaded (see `worker.start_guard`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path, PurePosixPath

from solbench.runner.worker_state import Failure, WorkerState, format_exception, harness_native

_perf_counter = time.perf_counter
_thread_enumerate = threading.enumerate


STDLIB_AND_HARNESS = frozenset(sys.stdlib_module_names) | {
    "torch", "triton", "numpy", "solbench", "pynvml", "safetensors", "pandas", "rich", "pytest", "cupti",
}


def handle_load(state: WorkerState, message: dict) -> dict:
    from solbench.spec.definition import Definition
    from solbench.spec.solution import Solution
    from solbench.timing.timer import integrity_violations

    state.definition = Definition.from_dict(message["definition"])
    solution = Solution.from_dict(message["solution"])
    state.data_roots = [Path(p) for p in message.get("data_roots", [])]
    if state.guard is not None:  # the audit hook reports writes below these (and the harness package)
        from solbench.check.worker_guard import installation_roots

        state.guard.protect([str(p) for p in state.data_roots] + installation_roots())
    shadowing = shadowing_sources([s.path for s in solution.sources])
    if shadowing:
        raise Failure("REWARD_HACK", f"source files would shadow the standard library or the harness: {shadowing}")
    source_dir = Path(message["work_dir"]) / "src"
    source_dir.mkdir(parents=True, exist_ok=True)
    for source in solution.sources:
        target = source_dir / source.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.content)
    state.source_dir = source_dir
    state.reference_module = load_reference_module(state.definition.reference)
    state.baselines = {}
    state.function = load_function(state, solution, source_dir, float(message.get("compile_timeout_s", 300)))
    state.destination_passing = solution.spec.destination_passing_style
    violations = integrity_violations()
    if violations:
        raise Failure("REWARD_HACK", f"harness functions were replaced while loading the solution: {violations}")
    return {"ok": True}


def load_function(state: WorkerState, solution, source_dir: Path, timeout_s: float):
    """The solution's entry point, loaded by its language; SKIPPED where this device cannot judge it."""
    from solbench.runner import languages

    try:
        language = languages.for_solution(solution)
        if language.needs_cuda and not state.is_cuda:
            raise languages.LoadError(f"{language.name} solutions need a CUDA GPU; this machine has none", "SKIPPED")
        if language.name == "triton" and not state.is_cuda and uses_bfloat16(state.definition):
            raise languages.LoadError("Triton's CPU interpreter computes bfloat16 arithmetic wrongly (triton#11584); "
                                      "this solution can only be judged on a GPU", "SKIPPED")
        return language.load(solution, source_dir, state.device, timeout_s)
    except languages.LoadError as exc:
        raise Failure(exc.status, str(exc)) from None


def uses_bfloat16(definition) -> bool:
    return any(t.dtype == "bfloat16" for t in {**definition.inputs, **definition.outputs}.values())


def shadowing_sources(paths: list[str]) -> list[str]:
    """Source files whose top-level module name is a standard-library or harness package."""
    bad = []
    for path in paths:
        parts = PurePosixPath(path).parts
        top = parts[0] if len(parts) > 1 else PurePosixPath(parts[0]).stem
        if top in STDLIB_AND_HARNESS:
            bad.append(path)
    return bad


def load_reference_module(source: str):
    """The reference as a module (needed for custom input entrypoints), from a real file."""
    import importlib.util
    import tempfile

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


def make_call_inputs(state: WorkerState, workload_data: dict, seed: int, *, fresh_copy: bool = True):
    """The inputs for (workload, seed); cached per workload, handed out as copies unless asked not to
    (a call may write into its inputs, which must not change what the next request sees)."""
    from solbench.inputs.errors import InputError, MissingDataError
    from solbench.inputs.generate import make_inputs
    from solbench.spec.workload import Workload

    key = json.dumps(workload_data, sort_keys=True)
    if key != state.inputs_cache_key:
        state.inputs_cache, state.inputs_cache_key = {}, key
    if seed not in state.inputs_cache:
        workload = Workload.from_dict(workload_data)
        axes = state.definition.resolve_axes(workload.axes)
        entry = state.definition.custom_inputs_entrypoint
        custom = getattr(state.reference_module, entry) if entry else None
        # Every set of one workload has the same size: make room before building the next one, not
        # after (two 21 GiB sets and their generation temporaries do not fit beside each other).
        held_bytes = cached_bytes(state)
        set_bytes = max((tensor_bytes(state, e[2]) for e in state.inputs_cache.values()), default=0)
        if held_bytes and held_bytes + set_bytes > cache_budget_bytes(state):
            drop_input_cache(state)
        for attempt in (0, 1):
            try:
                args = make_inputs(state.definition, workload, axes, seed=seed, device=state.device,
                                   data_roots=state.data_roots, custom_entrypoint=custom)
                break
            except MissingDataError as exc:
                raise Failure("MISSING_DATA", str(exc)) from None
            except (InputError, state.torch.cuda.OutOfMemoryError) as exc:
                if attempt == 0 and state.inputs_cache and "OutOfMemoryError" in f"{type(exc).__name__}: {exc}":
                    drop_input_cache(state)  # the cached sets were in the way: try once without them
                    continue
                if isinstance(exc, InputError):
                    raise Failure("INVALID_REFERENCE", f"input generation failed: {exc}") from None
                raise Failure("INVALID_REFERENCE", f"input generation failed: out of memory: {exc}") from None
        state.inputs_cache[seed] = (workload, axes, args)
    workload, axes, args = state.inputs_cache[seed]
    if fresh_copy:
        args = [a.clone() if isinstance(a, state.torch.Tensor) else a for a in args]
    return workload, axes, args


def tensor_bytes(state: WorkerState, values: list) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, state.torch.Tensor))


def cached_bytes(state: WorkerState) -> int:
    return sum(tensor_bytes(state, entry[2]) for entry in state.inputs_cache.values())


def cache_budget_bytes(state: WorkerState) -> int:
    if state.is_cuda:
        return state.torch.cuda.get_device_properties(0).total_memory // 4
    return 2 << 30


def trim_threshold_bytes(state: WorkerState) -> int:
    """Caches below this stay: regenerating them would cost more than the memory they hold."""
    return cache_budget_bytes(state) // 4


def handle_inputs(state: WorkerState, message: dict) -> dict:
    """In the reference worker: build a workload's inputs for a seed (a failure is the reference's);
    with `run`, also run the reference on them (can this GPU run the problem at all?)."""
    _, _, args = make_call_inputs(state, message["workload"], message["seed"], fresh_copy=bool(message.get("run")))
    if message.get("run"):
        try:
            invoke(state, args, None)
            state.synchronize()
        except Exception as exc:  # noqa: BLE001
            raise Failure("INVALID_REFERENCE", "the reference raised:\n" + format_exception(exc)) from None
    return {"ok": True}


def handle_trim(state: WorkerState, message: dict) -> dict:
    """Before the other worker is timed: drop this worker's input cache when it is large, so both
    workers' copies of multi-GB inputs do not share the device. Inputs are rebuilt from seeds on
    demand; IPC exports and received copies (transfer.py) are kept."""
    held_bytes = cached_bytes(state)
    threshold_bytes = message.get("min_bytes")
    if type(threshold_bytes) is not int:
        threshold_bytes = trim_threshold_bytes(state)
    if held_bytes <= threshold_bytes:
        return {"ok": True, "freed_bytes": 0, "held_bytes": held_bytes}
    drop_input_cache(state)
    return {"ok": True, "freed_bytes": held_bytes, "held_bytes": 0}


def drop_input_cache(state: WorkerState) -> None:
    """Forget the cached input sets and hand their memory back to the device (for the other worker)."""
    state.inputs_cache.clear()
    if state.is_cuda:
        state.torch.cuda.empty_cache()


def invoke(state: WorkerState, args: list, outputs: list | None):
    if outputs is not None:
        state.function(*args, *outputs)
        return outputs
    return state.function(*args)


def handle_call(state: WorkerState, message: dict) -> dict:
    """One correctness trial: fresh inputs from the seed, one call, outputs back to the judge."""
    from solbench.check.outputs import normalize_outputs, returned_views, structural_check
    from solbench.inputs.generate import allocate_outputs
    from solbench.runner import transfer

    torch = state.torch
    with harness_native(state):
        transfer.release_all(state)
    workload, axes, args = make_call_inputs(state, message["workload"], message["seed"])
    pristine = state.inputs_cache[message["seed"]][2]  # the cached originals: args are copies of them
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
        except Exception as exc:  # noqa: BLE001
            raise Failure("INCORRECT_SHAPE", f"outputs could not be matched to the definition: {exc}") from None
    status, text = structural_check(result, state.definition, axes)
    if status is not None:
        raise Failure(str(status), text)
    names = list(state.definition.inputs)
    aliases = returned_views(result, state.definition, args)
    mutated = [names[i] for i in changed_tensors(pristine, args)]
    if state.baseline_threads is None:
        state.baseline_threads = {t.ident for t in _thread_enumerate()}
    # Whether writing into inputs or returning them is acceptable depends on what the reference
    # does; the orchestrator decides once it knows (see evaluate.check_side_effects).
    # Large GPU outputs go to the reference worker as CUDA IPC handles of copies (transfer.py) when asked.
    with harness_native(state):
        outputs = transfer.export_outputs(state, list(result), message.get("ipc_min_bytes"), copy=True)
    return {"ok": True, "outputs": outputs, "call_s": call_s, "aliased_inputs": aliases,
            "mutated_inputs": mutated}


def handle_judge(state: WorkerState, message: dict) -> dict:
    """In the reference worker: run the reference on the seed's inputs and judge the given outputs."""
    from solbench.runner import transfer

    try:
        return judge_outputs(state, message)
    finally:
        transfer.forget_received(state)  # copies a `receive` made are used by this judge or by none


def judge_outputs(state: WorkerState, message: dict) -> dict:
    from solbench.check.correctness import check_outputs
    from solbench.check.outputs import normalize_outputs, returned_views
    from solbench.runner import transfer

    torch = state.torch
    workload, axes, args = make_call_inputs(state, message["workload"], message["seed"])
    pristine = state.inputs_cache[message["seed"]][2]  # the cached originals: args are copies of them
    try:
        reference = normalize_outputs(invoke(state, args, None), state.definition, axes)
        state.synchronize()
    except Exception as exc:  # noqa: BLE001
        raise Failure("INVALID_REFERENCE", "the reference raised:\n" + format_exception(exc)) from None
    names = list(state.definition.inputs)
    aliases = returned_views(reference, state.definition, args)
    mutated = [names[i] for i in changed_tensors(pristine, args)]
    del args
    candidate = [transfer.take_received(state, o) if transfer.is_received(o)
                 else o.to(state.device) if isinstance(o, torch.Tensor) else o for o in message["outputs"]]
    status, correctness = check_outputs(candidate, reference, state.definition, workload.tolerance, axes)
    return {"ok": True, "status": status.value, "correctness": correctness.to_dict(),
            "aliased_inputs": aliases, "mutated_inputs": mutated}


def as_list(result) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def refill_outputs(outputs: list) -> None:
    import torch

    for o in outputs:
        if isinstance(o, torch.Tensor):
            if o.is_floating_point():
                o.fill_(float("nan"))
            elif o.dtype != torch.bool:
                o.fill_(torch.iinfo(o.dtype).min if o.dtype != torch.uint8 else 255)


def changed_tensors(before: list, after: list) -> list[int]:
    """Indices of tensor inputs whose bytes changed (NaN-safe: compares raw bytes)."""
    import torch

    changed = []
    for i, (b, a) in enumerate(zip(before, after)):
        if b is None or not isinstance(a, torch.Tensor):
            continue
        if b.shape != a.shape or b.dtype != a.dtype:
            changed.append(i)
            continue
        if b.numel() == 0:
            continue
        if not bytes_equal(b, a.detach()):
            changed.append(i)
    return changed


COMPARE_CHUNK_BYTES = 1 << 26


def bytes_equal(x, y) -> bool:
    """Raw-byte equality of two same-shaped tensors, in chunks: `torch.equal` on a GPU builds an
    elementwise mask as large as the tensor, which does not fit beside a 20 GiB input."""
    import torch

    x = x.reshape(-1).contiguous().view(torch.uint8)
    y = y.reshape(-1).contiguous().view(torch.uint8)
    return all(torch.equal(x[start:start + COMPARE_CHUNK_BYTES], y[start:start + COMPARE_CHUNK_BYTES])
               for start in range(0, x.numel(), COMPARE_CHUNK_BYTES))


def handle_receive(state: WorkerState, message: dict) -> dict:
    """In the reference worker: copy outputs exported by CUDA IPC into this worker's memory."""
    from solbench.runner import transfer

    return transfer.handle_receive(state, message)


def handle_release(state: WorkerState, message: dict) -> dict:
    """In the solution's worker: drop exports the reference worker has copied."""
    from solbench.runner import transfer

    with harness_native(state):
        return transfer.handle_release(state, message)


def handle_fetch(state: WorkerState, message: dict) -> dict:
    """In the solution's worker: exports as bytes, when the reference worker could not open them."""
    from solbench.runner import transfer

    with harness_native(state):
        return transfer.handle_fetch(state, message)
