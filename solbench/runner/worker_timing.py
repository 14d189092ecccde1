"""Worker requests that time a call: the timed block (fresh inputs per call at rotating addresses,
sampled outputs kept for the judge, the thread watch), the escaped-work probe, and the baseline
variants (torch.compile of the reference, a shipped optimised baseline).
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from solbench.runner.config import GRAPH_CAPTURE_FAILED
from solbench.runner.worker_calls import (
    as_list,
    changed_tensors,
    invoke,
    load_function,
    make_call_inputs,
    refill_outputs,
    tensor_bytes,
    trim_threshold_bytes,
)
from solbench.runner.worker_state import Failure, WorkerState, format_exception, harness_native

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


FRESH_INPUTS_BUDGET_S = 3.0  # per timed block: time spent drawing fresh inputs before sets are reused


RECENT_SETS = 4
WARM_PROBE_BELOW_MS = 10.0  # calls this short get an unrecorded CUPTI warm-up call before the probe


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
    from solbench.check.outputs import normalize_outputs, returned_views, structural_check
    from solbench.timing.config import TimingConfig
    from solbench.timing.timer import integrity_violations, time_iterations

    torch = state.torch
    seeds = list(message["seeds"])
    for seed in [s for s in state.inputs_cache if s not in seeds]:
        state.inputs_cache.pop(seed)  # e.g. the trials' inputs: not needed by a timed block, and maybe GBs
    generated = [make_call_inputs(state, message["workload"], seed, fresh_copy=False) for seed in seeds]
    axes = generated[0][1]
    sets = [args for _, _, args in generated]
    del generated
    budget_s = float(message.get("fresh_inputs_budget_s", FRESH_INPUTS_BUDGET_S))
    fresh = budget_s > 0 and (len(sets) < 2 or changed_tensors(sets[0], sets[1]) != [])
    if fresh:
        # Calls draw their own inputs: the other sets only served the check above (the first is the
        # slots' template). The judge rebuilds kept calls' inputs in the reference worker, not here.
        for seed in seeds[1:]:
            if seed != seeds[0]:
                state.inputs_cache.pop(seed, None)
        sets = sets[:1]
    # Slots and recent fresh sets each get a quarter of the memory free now, so the harness's own
    # copies of multi-GB inputs never push the call out of memory.
    copies_budget_bytes = harness_budget_bytes(state)
    slots = build_slots(state, sets, axes, message.get("max_slots", 8), copies_budget_bytes)
    set_bytes = tensor_bytes(state, sets[0])
    recent_limit = recent_sets_limit(set_bytes, copies_budget_bytes)
    if fresh and set_bytes > trim_threshold_bytes(state):
        state.inputs_cache.pop(seeds[0], None)  # a multi-GB template the slots now hold a copy of
        sets = []
    # A uniform random sample (reservoir) of the calls in this block has its outputs kept for the judge,
    # and the last call's always. The choice for call i is made after it returns, from the OS's
    # entropy: the call cannot know.
    keep = int(message.get("checked_outputs", 3))
    required = min(keep, int(message.get("required_outputs", keep)))  # kept even past the memory budget
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
        aliased.update(returned_views(outs, state.definition, slot_inputs))
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
        out_bytes = tensor_bytes(state, outs)
        room = max(1, required, min(keep, stash_budget_bytes // max(out_bytes, 1)))
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
            while len(recent) >= recent_limit:  # room first: the new set counts against the budget too
                recent.pop(0)
            source = make_call_inputs(state, message["workload"], seed, fresh_copy=False)[2]
            state.inputs_cache.pop(seed, None)  # used once: not worth caching
            generation_s[0] += _perf_counter() - started
            recent.append((seed, source))
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
    graphs: list | None = None
    if state.is_cuda and config.cuda_graph:
        graphs, graph_note = capture_graphs(state, slots)
        if graphs is None:  # nothing more in this process: a failed capture can leave it broken
            raise Failure("RUNTIME_ERROR", f"{GRAPH_CAPTURE_FAILED}: {graph_note}")

        def run(i: int):  # noqa: F811 - the same call, replayed from its slot's graph
            graph, result = graphs[i % len(graphs)]
            graph.replay()
            last[0], last[1] = i, result
            return result
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
    if graphs:
        # Their private pool holds every slot's intermediates (29 GiB for a SAM-HQ window attention on
        # an H100): freed before the probe runs the call as launched, or the probe runs out of memory.
        graphs.clear()
        torch.cuda.empty_cache()
    call_ms = max(statistics.median(timing.samples_ms), statistics.median(timing.host_ms or [0.0]))
    # Past its generation budget the block drew from recent sets; so does the probe (a slow custom
    # generator would otherwise cost a fresh set per probe call, outside any budget).
    probe = (escaped_work_probe(state, message, config, slots, sets, fresh, call_ms,
                                recent=[source for _, source in recent] if reused[0] else None)
             if state.is_cuda and message.get("probe", True) else None)
    violations = integrity_violations()
    if violations:
        raise Failure("REWARD_HACK", f"timing functions were replaced: {violations}")
    hidden = background_activity(state)
    if hidden:
        raise Failure("REWARD_HACK", hidden)
    sampled = [[i, seed, outs] for i, (outs, seed) in sorted(stashed.items())]
    flags = list(timing.stats.flags) + ([] if fresh else ["timed_inputs_fixed"])
    flags += ["timed_inputs_reused"] if reused[0] else []
    flags += ["checked_outputs_capped"] if keep > 0 and len(stashed) < min(keep, seen[0]) else []
    flags += ["timed_inputs_single_slot"] if len(slots) < 2 else []  # every call saw its inputs at one address
    return {"ok": True, "samples_ms": list(timing.samples_ms), "warmup": timing.warmup_done,
            "stop_reason": timing.stop_reason, "wall_s": timing.wall_s, "clocks_before": timing.clocks_before,
            "clocks_after": timing.clocks_after, "flags": flags, "sampled": sampled,
            "slots": len(slots), "energy_mj_per_call": timing.energy_mj_per_call,
            "host_ms": timing.host_ms, "hold_ms": timing.hold_ms, "exposed": timing.exposed,
            "probe": probe.to_dict() if probe is not None else None, "aliased_inputs": sorted(aliased)}


def capture_graphs(state: WorkerState, slots: list) -> tuple[list | None, str | None]:
    """One CUDA graph per argument slot, capturing the call on that slot's tensors, sharing one
    memory pool (they are replayed in capture order). Each slot is called once on a side stream
    first (lazy initialisation, autotuning, allocator warm-up), as capture requires. A call that
    cannot be captured (a host sync, the legacy default stream, CPU work on data) gives (None, why)
    and is timed as launched, in a new process (`DeviceSession.ask_timed`).
    """
    torch = state.torch
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for slot_inputs, slot_outputs in slots:
                invoke(state, slot_inputs, slot_outputs)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        graphs = []
        for slot_inputs, slot_outputs in slots:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                result = invoke(state, slot_inputs, slot_outputs)
            graphs.append((graph, result))
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the solution's call is not capturable: time it as launched
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001, S110 - a broken capture may leave an error behind; the block reports it
            pass
        return None, f"not captured ({type(exc).__name__}: {str(exc)[:300]}); timed as launched"
    return graphs, None


def escaped_work_probe(state: WorkerState, message: dict, config, slots: list, sets: list, fresh: bool,
                       call_ms: float = 0.0, recent: list | None = None):
    """A few isolated calls after the timed block: did GPU work escape the timer's events?

    See solbench.check.cupti_activity: a device synchronize that still waits after the call's end
    event, or CUPTI activity beyond the event time, is work on a stream nobody waited for.
    """
    from solbench.check.cupti_activity import PROBE_BUDGET_S, probe
    from solbench.timing.timer import flusher_for

    torch = state.torch
    slot_inputs, slot_outputs = slots[0]
    flush = flusher_for(torch.device(state.device), config.l2_flush_mode).flush if config.l2_flush else None

    chooser = random.SystemRandom()

    def prepare(i: int) -> None:
        if fresh and recent:
            source = recent[chooser.randrange(len(recent))]
        elif fresh:
            seed = chooser.getrandbits(62)
            source = make_call_inputs(state, message["workload"], seed, fresh_copy=False)[2]
            state.inputs_cache.pop(seed, None)
        else:
            source = sets[i % len(sets)]
        for dst, src in zip(slot_inputs, source):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        if slot_outputs is not None:
            refill_outputs(slot_outputs)

    try:
        result = probe(prepare, lambda i: invoke(state, slot_inputs, slot_outputs), first_index=1 << 30,
                       flush=flush, quiet=lambda: harness_native(state), budget_s=PROBE_BUDGET_S,
                       warm_call=call_ms < WARM_PROBE_BELOW_MS)
    except Exception as exc:  # noqa: BLE001 - the solution failed in a probe call
        raise Failure("RUNTIME_ERROR", "the solution raised during the escaped-work probe:\n"
                      + format_exception(exc)) from None
    if result.cupti != "used" and state.guard is not None:
        state.guard.note(f"cupti: {result.cupti} (escaped work checked by device synchronisation only)")
    verdict = result.verdict()
    if verdict:
        raise Failure("REWARD_HACK", verdict)
    return result


def build_slots(state: WorkerState, sets: list[list], axes: dict, max_slots: int, budget_bytes: int) -> list:
    """Pre-allocated argument slots, so each timed call sees its inputs at another address; as many
    as `budget_bytes` holds, at least one (the trace then says so: `timed_inputs_single_slot`).
    Each starts as a copy of the template set, never uninitialised memory: a call made before the
    first `prepare` (CUDA graph warm-up and capture) must see valid inputs (indices in range,
    lengths that fit), or it fails on garbage, or captures a graph shaped by it."""
    from solbench.inputs.generate import allocate_outputs

    torch = state.torch
    count = int(max(1, min(max_slots, budget_bytes // max(tensor_bytes(state, sets[0]), 1))))
    slots = []
    for _ in range(count):
        inputs = [torch.empty_like(a).copy_(a) if isinstance(a, torch.Tensor) else a for a in sets[0]]
        outputs = allocate_outputs(state.definition, axes, state.device) if state.destination_passing else None
        slots.append((inputs, outputs))
    return slots


def harness_budget_bytes(state: WorkerState) -> int:
    """A quarter of the device memory free to this process (what its allocator caches counts as free)."""
    if not state.is_cuda:
        return 2 << 30
    torch = state.torch
    free_bytes, _ = torch.cuda.mem_get_info()
    return (free_bytes + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()) // 4


def recent_sets_limit(set_bytes: int, budget_bytes: int) -> int:
    """How many fresh sets to keep for reuse once generation is over budget: within budget_bytes, at least one."""
    return int(max(1, min(RECENT_SETS, budget_bytes // max(set_bytes, 1))))


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
