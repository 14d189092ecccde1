"""The worker process: loads one solution (or the reference) and runs it on request.

Started by `solbench.runner.process.WorkerProcess`; talks only over the inherited channel fd.
Everything the harness needs from torch, time and threading is bound here before any solution code
is imported. The worker never receives reference outputs: it regenerates its inputs from seeds and
sends its outputs back for the orchestrator to judge.
"""

from __future__ import annotations

import contextlib
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
_main_thread = threading.main_thread
_clock_gettime = time.clock_gettime
_thread_cpu_clock = getattr(time, "pthread_getcpuclockid", None)


def thread_cpu_s(thread: threading.Thread) -> float | None:
    """CPU seconds a thread has used so far (None when unknown or it has ended)."""
    if _thread_cpu_clock is None or thread.ident is None:
        return None
    try:
        return _clock_gettime(_thread_cpu_clock(thread.ident))
    except (OSError, ValueError, OverflowError):
        return None


class ThreadWatch:
    """Threads of the solution around timed calls: they may persist (a pool), they may not work
    while the call is over, and one that was alive after a call may not finish later (it was busy)."""

    def __init__(self, state: WorkerState):
        self.state = state
        self.seen: dict[int, threading.Thread] = {}
        self.marks: dict[int, float] = {}
        self.window_start = 0.0

    def extra(self) -> list[threading.Thread]:
        # The harness runs on the main thread; a worker that never served a trial (the reference
        # worker judges instead) has no baseline yet, and its main thread is not the solution's.
        base = (self.state.baseline_threads or set()) | {_main_thread().ident}
        return [t for t in _thread_enumerate() if t.ident not in base and t.is_alive()]

    def call_returned(self) -> None:
        """Right after a call: remember the solution's threads and their CPU clocks."""
        self.marks = {}
        for t in self.extra():
            self.seen[t.ident] = t
            used = thread_cpu_s(t)
            if used is not None:
                self.marks[t.ident] = used
        self.window_start = _perf_counter()

    def check_idle(self) -> None:
        """Before the next call: no solution thread may have kept computing meanwhile."""
        window = _perf_counter() - self.window_start
        for ident, before in self.marks.items():
            thread = self.seen[ident]
            after = thread_cpu_s(thread)
            if after is not None and after - before > max(50e-6, 0.5 * window):
                raise Failure("REWARD_HACK", f"thread {thread.name!r} kept computing for {(after - before) * 1e6:.0f} us "
                                             f"after the call had returned (work hidden from the timer)")
        self.marks = {}

    def check_end(self) -> None:
        finished = [t.name for t in self.seen.values() if not t.is_alive()]
        if finished:
            raise Failure("REWARD_HACK", f"threads {finished} were still running after a call returned and "
                                         f"finished later (work hidden from the timer)")
        if self.state.baseline_threads is not None:  # idle persistent helpers (a pool) are part of the solution
            self.state.baseline_threads |= set(self.seen)

STDLIB_AND_HARNESS = frozenset(sys.stdlib_module_names) | {
    "torch", "triton", "numpy", "solbench", "pynvml", "safetensors", "pandas", "rich", "pytest", "cupti",
}


FRESH_INPUTS_BUDGET_S = 3.0  # per timed block: time spent drawing fresh inputs before sets are reused
RECENT_SETS = 4


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
        self.baselines: dict[str, Any] = {}  # shipped baselines loaded in the reference worker, by content hash
        self.source_dir: Path | None = None
        self.data_roots: list[Path] = []
        self.guard = None  # solbench.check.worker_guard.GuardState, set by main()
        # Generated inputs of the current workload by seed: trials, judging and timed blocks reuse
        # them instead of regenerating (custom entrypoints can take seconds).
        self.inputs_cache: dict[int, tuple] = {}
        self.inputs_cache_key: str | None = None

    def synchronize(self) -> None:
        if self.is_cuda:
            self.torch.cuda.synchronize()


# -- requests --------------------------------------------------------------------------------

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
    aliases = input_aliases(result, state.definition, args)
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
    from solbench.check.outputs import input_aliases, normalize_outputs
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
    aliases = input_aliases(reference, state.definition, args)
    mutated = [names[i] for i in changed_tensors(pristine, args)]
    del args
    candidate = [transfer.take_received(state, o) if transfer.is_received(o)
                 else o.to(state.device) if isinstance(o, torch.Tensor) else o for o in message["outputs"]]
    status, correctness = check_outputs(candidate, reference, state.definition, workload.tolerance, axes)
    return {"ok": True, "status": status.value, "correctness": correctness.to_dict(),
            "aliased_inputs": aliases, "mutated_inputs": mutated}


def handle_time_compiled(state: WorkerState, message: dict) -> dict:
    """In the reference worker: time `torch.compile` of the reference, a baseline a kernel should beat.

    The compiled function must agree with the eager reference on the first timed input set first;
    a compile that changes the answer is not a baseline.
    """
    from solbench.check.correctness import check_outputs
    from solbench.check.outputs import normalize_outputs

    torch = state.torch
    eager = state.function
    if getattr(state, "compiled", None) is None or state.compiled[0] is not eager:
        state.compiled = (eager, torch.compile(eager))
    compiled = state.compiled[1]
    workload, axes, args = make_call_inputs(state, message["workload"], message["seeds"][0])
    try:
        expected = normalize_outputs(eager(*args), state.definition, axes)
        got = normalize_outputs(compiled(*make_call_inputs(state, message["workload"], message["seeds"][0])[2]),
                                state.definition, axes)
        state.synchronize()
    except Exception as exc:  # noqa: BLE001 - compilation is allowed to fail: then there is no such baseline
        raise Failure("RUNTIME_ERROR", "torch.compile of the reference failed:\n" + format_exception(exc)) from None
    status, correctness = check_outputs(got, expected, state.definition, workload.tolerance, axes)
    if status.value != "PASSED":
        raise Failure("INCORRECT_NUMERICAL", f"torch.compile of the reference disagrees with it: {correctness.message}")
    state.function = compiled
    try:
        return handle_time(state, message)
    finally:
        state.function = eager


def handle_time_baseline(state: WorkerState, message: dict) -> dict:
    """In the reference worker: time the optimised baseline shipped with the problem (trusted problem
    code, like the reference; `solbench.spec.problem.find_baseline`).

    Like the torch.compile baseline, it must agree with the eager reference on the first timed input
    set first, under the workload's tolerance: a baseline that changes the answer is not a baseline.
    """
    import tempfile

    from solbench.check.correctness import check_outputs
    from solbench.check.outputs import normalize_outputs
    from solbench.inputs.generate import allocate_outputs
    from solbench.spec.solution import Solution

    solution = Solution.from_dict(message["baseline"])
    key = solution.content_hash()
    if key not in state.baselines:
        folder = Path(tempfile.mkdtemp(prefix="solbench_baseline_"))
        for source in solution.sources:
            (folder / source.path).write_text(source.content)
        state.baselines[key] = load_function(state, solution, folder, float(message.get("compile_timeout_s", 300)))
    baseline, dps = state.baselines[key], solution.spec.destination_passing_style
    eager, eager_dps = state.function, state.destination_passing
    workload, axes, args = make_call_inputs(state, message["workload"], message["seeds"][0])
    try:
        expected = normalize_outputs(eager(*args), state.definition, axes)
        args = make_call_inputs(state, message["workload"], message["seeds"][0])[2]
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
        return handle_time(state, message)
    finally:
        state.function, state.destination_passing = eager, eager_dps


def handle_time(state: WorkerState, message: dict) -> dict:
    """Time the call on inputs it has never seen, at fresh addresses; keep sampled outputs.

    Every call (warm-up and timed) gets a new input set drawn from a seed the OS's entropy picks in
    `prepare`, so no answer can be cached by address or by value and replayed; the seed of each
    kept output goes back so the judge can rebuild that call's inputs. Problems whose inputs do
    not depend on the seed (all from files) rotate the requested sets instead.
    """
    from solbench.check.outputs import input_aliases, normalize_outputs, structural_check
    from solbench.timing.config import TimingConfig
    from solbench.timing.timer import integrity_violations, time_iterations

    torch = state.torch
    seeds = list(message["seeds"])
    generated = [make_call_inputs(state, message["workload"], seed, fresh_copy=False) for seed in seeds]
    axes = generated[0][1]
    sets = [args for _, _, args in generated]
    budget_s = float(message.get("fresh_inputs_budget_s", FRESH_INPUTS_BUDGET_S))
    fresh = budget_s > 0 and (len(sets) < 2 or changed_tensors(sets[0], sets[1]) != [])
    slots = build_slots(state, sets, axes, message.get("max_slots", 8))
    # A uniform random sample (reservoir) of the calls in this block has its outputs kept for the judge,
    # and the last call's always. The choice for call i is made after it returns, from the OS's
    # entropy: the call cannot know.
    keep = int(message.get("checked_outputs", 3))
    # Kept outputs are device copies: with multi-GB outputs, as many as a quarter of the free memory
    # allows (at least the last call's), so the harness's own copies never push a call out of memory.
    stash_budget_bytes = torch.cuda.mem_get_info()[0] // 4 if state.is_cuda else 1 << 40
    chooser = random.SystemRandom()
    stashed: dict[int, Any] = {}
    last: list = [None, None, None]  # call index, its result, its input seed
    seen = [0]
    threads = ThreadWatch(state)

    aliased: set[str] = set()

    def checked(result, slot_inputs) -> list:
        """The call's outputs in definition order, refused if lazy or mis-shaped; inputs it returned
        views of are noted (the orchestrator allows only what the reference does)."""
        outs = (normalize_outputs(result, state.definition, axes) if not state.destination_passing
                else as_list(result))
        status, text = structural_check(outs, state.definition, axes)
        if status is not None:
            raise Failure(str(status), f"a timed call returned: {text}")
        aliased.update(input_aliases(outs, state.definition, slot_inputs))
        return outs

    def stash_last(final: bool = False) -> None:
        index, result, seed = last
        last[0] = last[1] = last[2] = None
        if index is None:
            return
        outs = checked(result, slots[index % len(slots)][0])
        if keep <= 0:
            return
        seen[0] += 1
        out_bytes = sum(o.numel() * o.element_size() for o in outs if isinstance(o, torch.Tensor))
        room = max(1, min(keep, stash_budget_bytes // max(out_bytes, 1)))
        if final:
            victim = None
            while len(stashed) >= room:
                del stashed[sorted(stashed)[0]]
        elif len(stashed) < room:
            victim = None
        else:
            slot = chooser.randrange(seen[0])
            if slot >= room:
                return
            victim = sorted(stashed)[slot]
        if victim is not None:
            del stashed[victim]
        stashed[index] = ([o.detach().clone() if isinstance(o, torch.Tensor) else o for o in outs], seed)

    generation_s, reused, recent = [0.0], [False], []

    def prepare(i: int) -> None:
        threads.call_returned()
        stash_last()
        slot_inputs, slot_outputs = slots[i % len(slots)]
        if fresh and generation_s[0] < budget_s:
            started = _perf_counter()
            seed = chooser.getrandbits(62)
            source = make_call_inputs(state, message["workload"], seed, fresh_copy=False)[2]
            state.inputs_cache.pop(seed, None)  # used once: not worth caching
            generation_s[0] += _perf_counter() - started
            recent.append((seed, source))
            del recent[:-RECENT_SETS]
        elif fresh:
            # Input generation is slow (custom entrypoints): past the budget, calls draw at random
            # from the last few fresh sets; the trace says so ("timed_inputs_reused").
            reused[0] = True
            seed, source = recent[chooser.randrange(len(recent))]
        else:
            seed, source = seeds[i % len(sets)], sets[i % len(sets)]
        for dst, src in zip(slot_inputs, source):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        if slot_outputs is not None:
            refill_outputs(slot_outputs)
        last[2] = seed
        threads.check_idle()

    def run(i: int):
        slot_inputs, slot_outputs = slots[i % len(slots)]
        result = invoke(state, slot_inputs, slot_outputs)
        last[0], last[1] = i, result
        return result

    config = TimingConfig(**message["config"])
    try:
        timing = time_iterations(run, prepare, state.device, config)
        threads.call_returned()
        state.synchronize()
        stash_last(final=True)
        threads.check_idle()
        threads.check_end()
    except Failure:
        raise
    except torch.cuda.OutOfMemoryError as exc:
        raise Failure("RUNTIME_ERROR", f"out of memory while timing: {exc}") from None
    except Exception as exc:  # noqa: BLE001
        raise Failure("RUNTIME_ERROR", "the solution raised while being timed:\n" + format_exception(exc)) from None
    probe = escaped_work_probe(state, message, slots, seeds, sets, fresh) if state.is_cuda else None
    violations = integrity_violations()
    if violations:
        raise Failure("REWARD_HACK", f"timing functions were replaced: {violations}")
    hidden = background_activity(state)
    if hidden:
        raise Failure("REWARD_HACK", hidden)
    sampled = [[i, seed, outs] for i, (outs, seed) in sorted(stashed.items())]
    flags = list(timing.stats.flags) + ([] if fresh else ["timed_inputs_fixed"])
    flags += ["timed_inputs_reused"] if reused[0] else []
    return {"ok": True, "samples_ms": list(timing.samples_ms), "warmup": timing.warmup_done,
            "stop_reason": timing.stop_reason, "wall_s": timing.wall_s, "clocks_before": timing.clocks_before,
            "clocks_after": timing.clocks_after, "flags": flags, "sampled": sampled,
            "slots": len(slots), "energy_mj_per_call": timing.energy_mj_per_call,
            "host_ms": timing.host_ms, "hold_ms": timing.hold_ms, "exposed": timing.exposed,
            "probe": probe.to_dict() if probe is not None else None, "aliased_inputs": sorted(aliased)}


def escaped_work_probe(state: WorkerState, message: dict, slots: list, seeds: list, sets: list, fresh: bool):
    """A few isolated calls after the timed block: did GPU work escape the timer's events?

    See solbench.check.cupti_activity: a device synchronize that still waits after the call's end
    event, or CUPTI activity beyond the event time, is work on a stream nobody waited for.
    """
    from solbench.check.cupti_activity import probe
    from solbench.timing.config import TimingConfig
    from solbench.timing.timer import flusher_for

    torch = state.torch
    slot_inputs, slot_outputs = slots[0]
    config = TimingConfig(**message["config"])
    flush = flusher_for(torch.device(state.device), config.l2_flush_mode).flush if config.l2_flush else None

    def prepare(i: int) -> None:
        seed = random.SystemRandom().getrandbits(62)
        source = make_call_inputs(state, message["workload"], seed, fresh_copy=False)[2] if fresh else sets[i % len(sets)]
        state.inputs_cache.pop(seed, None)
        for dst, src in zip(slot_inputs, source):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        if slot_outputs is not None:
            refill_outputs(slot_outputs)

    try:
        result = probe(prepare, lambda i: invoke(state, slot_inputs, slot_outputs), first_index=1 << 30,
                       flush=flush, quiet=lambda: harness_native(state))
    except Exception as exc:  # noqa: BLE001 - the solution failed in a probe call
        raise Failure("RUNTIME_ERROR", "the solution raised during the escaped-work probe:\n"
                      + format_exception(exc)) from None
    if result.cupti != "used" and state.guard is not None:
        state.guard.note(f"cupti: {result.cupti} (escaped work checked by device synchronisation only)")
    verdict = result.verdict()
    if verdict:
        raise Failure("REWARD_HACK", verdict)
    return result


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


def send_reply(channel: Connection, reply: dict, request_id) -> None:
    """Replies travel in the wire format (JSON + raw tensor bytes), tagged with the request id."""
    from solbench.runner import wire

    reply["id"] = request_id
    try:
        wire.send(channel, reply)
    except (TypeError, ValueError) as exc:  # e.g. an object JSON cannot hold
        wire.send(channel, {"ok": False, "status": "RUNTIME_ERROR", "id": request_id,
                            "log": f"the reply could not be encoded: {type(exc).__name__}: {exc}"})


def handle_time_and_export(state: WorkerState, message: dict) -> dict:
    """`handle_time`, with the sampled outputs exported by CUDA IPC when the request asks for it
    (they are the harness's own copies already; see transfer.py)."""
    from solbench.runner import transfer

    with harness_native(state):
        transfer.release_all(state)
    reply = handle_time(state, message)
    minimum = message.get("ipc_min_bytes")
    if minimum:
        with harness_native(state):
            reply["sampled"] = [[index, seed, transfer.export_outputs(state, outs, minimum, copy=False)]
                                for index, seed, outs in reply["sampled"]]
    return reply


def harness_native(state: WorkerState):
    """The guard's quiet section for the harness's own ctypes calls (no guard: nothing to quieten)."""
    return state.guard.harness_native() if state.guard is not None else contextlib.nullcontext()


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


HANDLERS = {"load": handle_load, "call": handle_call, "judge": handle_judge, "time": handle_time_and_export,
            "time_compiled": handle_time_compiled,
            "time_baseline": handle_time_baseline,
            "environment": handle_environment,
            "receive": handle_receive, "release": handle_release, "fetch": handle_fetch}


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
