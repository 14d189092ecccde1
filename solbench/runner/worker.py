"""The worker process: loads one solution (or the reference) and runs it on request.

Started by `solbench.runner.process.WorkerProcess`; talks only over the inherited channel fd.
Everything the harness needs from torch, time and threading is bound here before any solution code
is imported. The worker never receives reference outputs: it regenerates its inputs from seeds and
sends its outputs back for the orchestrator to judge.
"""

from __future__ import annotations

import gc
import json
import os
import random
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path, PurePosixPath
from typing import Any

_perf_counter = time.perf_counter
_thread_enumerate = threading.enumerate

STDLIB_AND_HARNESS = frozenset(sys.stdlib_module_names) | {
    "torch", "triton", "numpy", "solbench", "pynvml", "safetensors", "pandas", "rich", "pytest", "cupti",
}


class Failure(Exception):
    """A per-request failure with the trace status it maps to."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


class WorkerState:
    def __init__(self, device: str):
        import torch

        self.torch = torch
        self.device = device
        self.is_cuda = device.startswith("cuda")
        if self.is_cuda:
            torch.cuda.set_device(0)
        self.function = None
        self.destination_passing = True
        self.definition = None
        self.reference_module = None
        self.baseline_threads: set[int] | None = None
        self.source_dir: Path | None = None
        self.data_roots: list[Path] = []
        # Generated inputs of the current workload by seed: trials, judging and timed blocks reuse
        # them instead of regenerating (custom entrypoints can take seconds).
        self.inputs_cache: dict[int, tuple] = {}
        self.inputs_cache_key: str | None = None

    def synchronize(self) -> None:
        if self.is_cuda:
            self.torch.cuda.synchronize()


# -- requests --------------------------------------------------------------------------------

def handle_load(state: WorkerState, message: dict) -> dict:
    from solbench.runner import languages
    from solbench.spec.definition import Definition
    from solbench.spec.solution import Solution
    from solbench.timing.timer import integrity_violations

    state.definition = Definition.from_dict(message["definition"])
    solution = Solution.from_dict(message["solution"])
    state.data_roots = [Path(p) for p in message.get("data_roots", [])]
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
    try:
        language = languages.for_solution(solution)
        if language.needs_cuda and not state.is_cuda:
            raise languages.LoadError(f"{language.name} solutions need a CUDA GPU; this machine has none", "SKIPPED")
        if language.name == "triton" and not state.is_cuda and uses_bfloat16(state.definition):
            raise languages.LoadError("Triton's CPU interpreter computes bfloat16 arithmetic wrongly (triton#11584); "
                                      "this solution can only be judged on a GPU", "SKIPPED")
        state.function = language.load(solution, source_dir, state.device, float(message.get("compile_timeout_s", 300)))
    except languages.LoadError as exc:
        raise Failure(exc.status, str(exc)) from None
    state.destination_passing = solution.spec.destination_passing_style
    violations = integrity_violations()
    if violations:
        raise Failure("REWARD_HACK", f"harness functions were replaced while loading the solution: {violations}")
    return {"ok": True}


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
        try:
            args = make_inputs(state.definition, workload, axes, seed=seed, device=state.device,
                               data_roots=state.data_roots, custom_entrypoint=custom)
        except MissingDataError as exc:
            raise Failure("MISSING_DATA", str(exc)) from None
        except InputError as exc:
            raise Failure("INVALID_REFERENCE", f"input generation failed: {exc}") from None
        size = sum(a.numel() * a.element_size() for a in args if isinstance(a, state.torch.Tensor))
        held = sum(sum(a.numel() * a.element_size() for a in entry[2] if isinstance(a, state.torch.Tensor))
                   for entry in state.inputs_cache.values())
        if held + size > cache_budget_bytes(state):
            state.inputs_cache.clear()
        state.inputs_cache[seed] = (workload, axes, args)
    workload, axes, args = state.inputs_cache[seed]
    if fresh_copy:
        args = [a.clone() if isinstance(a, state.torch.Tensor) else a for a in args]
    return workload, axes, args


def cache_budget_bytes(state: WorkerState) -> int:
    if state.is_cuda:
        return state.torch.cuda.get_device_properties(0).total_memory // 4
    return 2 << 30


def invoke(state: WorkerState, args: list, outputs: list | None):
    if outputs is not None:
        state.function(*args, *outputs)
        return outputs
    return state.function(*args)


def handle_call(state: WorkerState, message: dict) -> dict:
    """One correctness trial: fresh inputs from the seed, one call, outputs back to the judge."""
    from solbench.check.outputs import input_aliases, normalize_outputs, structural_check
    from solbench.inputs.generate import allocate_outputs

    torch = state.torch
    workload, axes, args = make_call_inputs(state, message["workload"], message["seed"])
    pristine = snapshot_tensors(args)
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
    aliases = input_aliases(result, state.definition, args)
    mutated = [names[i] for i in changed_tensors(pristine, args)]
    if state.baseline_threads is None:
        state.baseline_threads = {t.ident for t in _thread_enumerate()}
    # Whether writing into inputs or returning them is acceptable depends on what the reference
    # does; the orchestrator decides once it knows (see evaluate.check_side_effects).
    return {"ok": True, "outputs": list(result), "call_s": call_s, "aliased_inputs": aliases,
            "mutated_inputs": mutated}


def handle_judge(state: WorkerState, message: dict) -> dict:
    """In the reference worker: run the reference on the seed's inputs and judge the given outputs."""
    from solbench.check.correctness import check_outputs
    from solbench.check.outputs import input_aliases, normalize_outputs

    torch = state.torch
    workload, axes, args = make_call_inputs(state, message["workload"], message["seed"])
    pristine = snapshot_tensors(args)
    try:
        reference = normalize_outputs(invoke(state, args, None), state.definition, axes)
        state.synchronize()
    except Exception as exc:  # noqa: BLE001
        raise Failure("INVALID_REFERENCE", "the reference raised:\n" + format_exception(exc)) from None
    names = list(state.definition.inputs)
    aliases = input_aliases(reference, state.definition, args)
    mutated = [names[i] for i in changed_tensors(pristine, args)]
    del args, pristine
    candidate = [o.to(state.device) if isinstance(o, torch.Tensor) else o for o in message["outputs"]]
    status, correctness = check_outputs(candidate, reference, state.definition, workload.tolerance, axes)
    return {"ok": True, "status": status.value, "correctness": correctness.to_dict(),
            "aliased_inputs": aliases, "mutated_inputs": mutated}


def handle_time(state: WorkerState, message: dict) -> dict:
    """Time the call over several distinct input sets at fresh addresses; keep sampled outputs."""
    from solbench.timing.config import TimingConfig
    from solbench.timing.timer import integrity_violations, time_iterations

    torch = state.torch
    generated = [make_call_inputs(state, message["workload"], seed, fresh_copy=False) for seed in message["seeds"]]
    axes = generated[0][1]
    sets = [args for _, _, args in generated]
    slots = build_slots(state, sets, axes, message.get("max_slots", 8))
    # A uniform random sample (reservoir) of the calls in this block has its outputs kept for the judge.
    # The choice for call i is made after it returns, from the OS's entropy: the call cannot know.
    keep = int(message.get("checked_outputs", 3))
    chooser = random.SystemRandom()
    stashed: dict[int, Any] = {}
    last: list = [None, None]
    seen = [0]

    def stash_last() -> None:
        index, result = last
        last[0] = last[1] = None
        if index is None or keep <= 0:
            return
        seen[0] += 1
        if len(stashed) < keep:
            victim = None
        else:
            slot = chooser.randrange(seen[0])
            if slot >= keep:
                return
            victim = sorted(stashed)[slot]
        if victim is not None:
            del stashed[victim]
        stashed[index] = [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in as_list(result)]

    def prepare(i: int) -> None:
        stash_last()
        slot_inputs, slot_outputs = slots[i % len(slots)]
        for dst, src in zip(slot_inputs, sets[i % len(sets)]):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        if slot_outputs is not None:
            refill_outputs(slot_outputs)

    def run(i: int):
        slot_inputs, slot_outputs = slots[i % len(slots)]
        result = invoke(state, slot_inputs, slot_outputs)
        last[0], last[1] = i, result
        return result

    config = TimingConfig(**message["config"])
    try:
        timing = time_iterations(run, prepare, state.device, config)
        stash_last()
        state.synchronize()
    except torch.cuda.OutOfMemoryError as exc:
        raise Failure("RUNTIME_ERROR", f"out of memory while timing: {exc}") from None
    except Exception as exc:  # noqa: BLE001
        raise Failure("RUNTIME_ERROR", "the solution raised while being timed:\n" + format_exception(exc)) from None
    violations = integrity_violations()
    if violations:
        raise Failure("REWARD_HACK", f"timing functions were replaced: {violations}")
    hidden = background_activity(state)
    if hidden:
        raise Failure("REWARD_HACK", hidden)
    if not state.destination_passing:
        from solbench.check.outputs import normalize_outputs

        stashed = {i: normalize_outputs(v[0] if len(v) == 1 else tuple(v), state.definition, axes)
                   for i, v in stashed.items()}
    sampled = [[i, i % len(sets), outs] for i, outs in sorted(stashed.items())]
    return {"ok": True, "samples_ms": list(timing.samples_ms), "warmup": timing.warmup_done,
            "stop_reason": timing.stop_reason, "wall_s": timing.wall_s, "clocks_before": timing.clocks_before,
            "clocks_after": timing.clocks_after, "flags": list(timing.stats.flags), "sampled": sampled,
            "slots": len(slots), "energy_mj_per_call": timing.energy_mj_per_call}


def as_list(result) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def build_slots(state: WorkerState, sets: list[list], axes: dict, max_slots: int) -> list:
    """Pre-allocated argument slots, so each timed call sees its inputs at another address."""
    from solbench.inputs.generate import allocate_outputs

    torch = state.torch
    set_bytes = sum(a.numel() * a.element_size() for a in sets[0] if isinstance(a, torch.Tensor))
    if state.is_cuda:
        free_bytes, _ = torch.cuda.mem_get_info()
        budget = free_bytes // 4
    else:
        budget = 2 << 30
    count = int(max(2, min(max_slots, budget // max(set_bytes, 1))))
    slots = []
    for _ in range(count):
        inputs = [torch.empty_like(a) if isinstance(a, torch.Tensor) else a for a in sets[0]]
        outputs = allocate_outputs(state.definition, axes, state.device) if state.destination_passing else None
        slots.append((inputs, outputs))
    return slots


def refill_outputs(outputs: list) -> None:
    import torch

    for o in outputs:
        if isinstance(o, torch.Tensor):
            if o.is_floating_point():
                o.fill_(float("nan"))
            elif o.dtype != torch.bool:
                o.fill_(torch.iinfo(o.dtype).min if o.dtype != torch.uint8 else 255)


def snapshot_tensors(args: list) -> list:
    import torch

    return [a.detach().clone() if isinstance(a, torch.Tensor) else None for a in args]


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
        if not torch.equal(b.reshape(-1).view(torch.uint8), a.detach().reshape(-1).contiguous().view(torch.uint8)):
            changed.append(i)
    return changed


def background_activity(state: WorkerState) -> str | None:
    """Python threads or child processes the solution left running after its calls returned."""
    if state.baseline_threads is not None:
        extra = [t.name for t in _thread_enumerate() if t.ident not in state.baseline_threads and t.is_alive()]
        if extra:
            return f"the solution left background threads running: {extra}"
    children = child_processes()
    if children:
        return f"the solution left child processes running: {children}"
    return None


def child_processes() -> list[int]:
    pids: list[int] = []
    task_dir = Path("/proc/self/task")
    if not task_dir.is_dir():
        return pids
    for task in task_dir.iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def handle_environment(state: WorkerState, message: dict) -> dict:
    from solbench.runner.environment import collect_environment

    return {"ok": True, "environment": collect_environment(state.device)}


def format_exception(exc: BaseException, limit: int = 6000) -> str:
    text = "".join(traceback.format_exception(exc))
    return text[-limit:]


HANDLERS = {"load": handle_load, "call": handle_call, "judge": handle_judge, "time": handle_time,
            "environment": handle_environment}


def main() -> None:
    channel = Connection(int(os.environ["SOLBENCH_CHANNEL_FD"]))
    os.environ.pop("SOLBENCH_CHANNEL_FD", None)
    from solbench.runner import wire

    state = WorkerState(os.environ.get("SOLBENCH_WORKER_DEVICE", "cpu"))
    import solbench.timing.timer  # noqa: F401  (binds the timing functions before solution code runs)

    while True:
        try:
            message = wire.recv(channel)
        except (EOFError, OSError):
            return
        op = message.get("op")
        if op == "shutdown":
            wire.send(channel, {"ok": True})
            return
        gc.collect()
        try:
            reply = HANDLERS[op](state, message)
        except Failure as failure:
            reply = {"ok": False, "status": failure.status, "log": str(failure)}
        except Exception as exc:  # noqa: BLE001 - harness bug or hostile code: report, keep serving
            reply = {"ok": False, "status": "RUNTIME_ERROR", "log": format_exception(exc)}
        if state.is_cuda:
            state.torch.cuda.empty_cache()
        wire.send(channel, reply)


if __name__ == "__main__":
    main()
