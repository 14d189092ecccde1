"""The timed block: fresh inputs per call at rotating addresses, sampled outputs kept for the judge,
the thread watch, CUDA graph replays, and the escaped-work probe after it.

Every call (warm-up and timed) gets a new input set drawn in `prepare` from a seed derived from the
orchestrator's block key, the call's index and a nonce the OS's entropy picks then (`call_seed`), so no
answer can be cached by address or by value and replayed, nor predicted from the request. Each kept
output goes back with its call index, the call that drew its set and that nonce: the orchestrator
recomputes the seed itself. Problems whose inputs do not depend on the seed (all from files) rotate
the requested sets instead (the orchestrator recomputes those seeds from the index).
"""

from __future__ import annotations

import json
import time
from typing import Any

import torch

from solbench.check.outputs import (
    LazyContainer,
    OutputError,
    input_aliases,
    normalize_outputs,
    returned_views,
    structural_check,
)
from solbench.inputs.generate import fillable, make_inputs
from solbench.inputs.seeds import call_seed
from solbench.protocol import messages as msg
from solbench.timing.timer import TimingResult, integrity_violations, time_iterations
from solbench.worker import transfer
from solbench.worker.calls import as_list, invoke, refill_outputs
from solbench.worker.graphs import capture_graphs, unaliased_outputs
from solbench.worker.inputs_cache import changed_tensors, make_call_inputs, tensor_bytes, trim_threshold_bytes
from solbench.worker.probe import PROBE_CALLS, WARM_PROBE_BELOW_MS, EscapedWorkProbe
from solbench.worker.slots import build_slots, harness_budget_bytes, recent_sets_limit
from solbench.worker.state import Failure, WorkerState, format_exception, harness_native
from solbench.worker.threads import ThreadWatch, background_activity
from solbench.worker.timed_draws import entropy_below, entropy_bits, first_fresh_set

_perf_counter = time.perf_counter

FRESH_INPUTS_BUDGET_S = 3.0  # per timed block: time spent drawing fresh inputs before sets are reused


class TimedBlock:
    """The state of one timed block: argument slots, the input rotation and the sampled outputs."""

    def __init__(self, state: WorkerState, request: msg.Time):
        started, seeds = _perf_counter(), list(request.seeds)
        self.state, self.request = state, request
        for seed in [s for s in state.inputs_cache if s not in seeds]:
            state.inputs_cache.pop(seed)  # e.g. the trials' inputs: not needed by a timed block, and maybe GBs
        self.budget_s = FRESH_INPUTS_BUDGET_S if request.fresh_inputs_budget_s is None else request.fresh_inputs_budget_s
        first_call = first_fresh_set(state, request, seeds, self.budget_s)
        generated = [make_call_inputs(state, request.workload, seed, fresh_copy=False)
                     for seed in (seeds[:1] if first_call is not None else seeds)]
        workload, self.axes = generated[0][0], generated[0][1]
        sets = [args for _, _, args in generated]
        del generated
        if first_call is not None:  # compared with the first set instead of a second requested one
            self.fresh = changed_tensors(sets[0], first_call[1]) != []
            if not self.fresh:
                first_call = None
                sets += [make_call_inputs(state, request.workload, seed, fresh_copy=False)[2] for seed in seeds[1:]]
        else:
            self.fresh = self.budget_s > 0 and (len(sets) < 2 or changed_tensors(sets[0], sets[1]) != [])
        if self.fresh:
            # Calls draw their own inputs: the other sets only served the check above (the first is the
            # slots' template). The judge rebuilds kept calls' inputs in the reference worker, not here.
            for seed in seeds[1:]:
                if seed != seeds[0]:
                    state.inputs_cache.pop(seed, None)
            sets = sets[:1]
        # Slots and recent fresh sets each get a quarter of the memory free now, so the harness's own
        # copies of multi-GB inputs never push the call out of memory.
        copies_budget_bytes = harness_budget_bytes(state)
        self.slots = build_slots(state, sets, self.axes, request.max_slots, copies_budget_bytes)
        set_bytes = tensor_bytes(sets[0])
        self.recent_limit = recent_sets_limit(set_bytes, copies_budget_bytes)
        if self.fresh and set_bytes > trim_threshold_bytes(state):
            state.inputs_cache.pop(seeds[0], None)  # a multi-GB template the slots now hold a copy of
            sets = []
        self.seeds, self.sets = seeds, sets
        # On a GPU, a call's fresh inputs are drawn straight into its slot (the values `make_inputs` gives
        # for the seed, as the judge rebuilds them): one write of the set, not a new set plus a copy.
        self.workload = workload
        self.fill_in_place = self.fresh and state.is_cuda and fillable(state.definition, workload)
        # A uniform random sample (reservoir) of the calls in this block has its outputs kept for the
        # judge, and the last call's always. The choice for call i is made after it returns, from the
        # OS's entropy: the call cannot know.
        self.keep = request.checked_outputs
        self.required = min(self.keep, request.required_outputs if request.required_outputs is not None else self.keep)
        # Kept outputs are device copies: with multi-GB outputs, as many as a quarter of the free memory
        # allows (at least the last call's), so the harness's own copies never push a call out of memory.
        self.stash_budget_bytes = torch.cuda.mem_get_info()[0] // 4 if state.is_cuda else 1 << 40
        self.graphs: list | None = None
        self.poisoned: list[list] = []  # per graph: its outputs that are not views of its slot's inputs
        self.key = block_key(state, request)
        self.begin(request)
        if first_call is not None and tensor_bytes(first_call[1]) <= trim_threshold_bytes(state):
            self.first_call = first_call
        self.phases_s["setup"] = _perf_counter() - started

    def begin(self, request: msg.Time) -> None:
        """Fresh per-block state; the slots (and their graphs) may be kept from an earlier block of the same
        workload in this process (`handle_time`): they hold no result of the solution's."""
        self.request = request
        self.keep = request.checked_outputs
        self.required = min(self.keep, request.required_outputs if request.required_outputs is not None else self.keep)
        self.stashed: dict[int, Any] = {}
        self.last: list = [None, None, None]  # call index, its result, its input set's (source, nonce, seed)
        self.seen = 0
        self.threads = ThreadWatch(self.state)
        self.aliased: set[str] = set()
        self.written: set[str] = set()  # inputs a kept call returned views of and wrote into
        self.generation_s, self.draws, self.reused, self.recent = 0.0, 0, False, []
        self.first_call: tuple[tuple, list, float] | None = None  # call 0's fresh set, drawn during setup
        self.phases_s: dict[str, float] = {}

    def checked(self, result, slot_inputs) -> list:
        """The call's outputs in definition order, refused if lazy (a container or a tensor) or mis-shaped;
        inputs it returned views of are noted (judged by value; the orchestrator flags what the reference
        does not do)."""
        definition = self.state.definition
        try:
            outs = (normalize_outputs(result, definition, self.axes) if not self.state.destination_passing
                    else as_list(result))
        except OutputError as exc:
            status = "REWARD_HACK" if isinstance(exc, LazyContainer) else "INCORRECT_SHAPE"
            raise Failure(status, f"a timed call returned: {exc}") from None
        status, text = structural_check(outs, definition, self.axes)
        if status is not None:
            raise Failure(str(status), f"a timed call returned: {text}")
        self.aliased.update(returned_views(outs, definition, slot_inputs))
        return outs

    def stash_last(self, final: bool = False) -> None:
        """Keep the last call's outputs if the reservoir draws it (always the block's final call); at most
        one kept output per input set, so no two checked outputs are judged on the same inputs."""
        index, result, drawn = self.last
        self.last[0] = self.last[1] = self.last[2] = None
        if index is None:
            return
        outs = self.checked(result, self.slots[index % len(self.slots)][0])
        if self.keep <= 0:
            return
        self.seen += 1
        out_bytes = tensor_bytes(outs)
        room = max(1, self.required, min(self.keep, self.stash_budget_bytes // max(out_bytes, 1)))
        stashed = self.stashed
        same_set = [k for k, (_, kept) in stashed.items() if kept[0] == drawn[0]]
        if same_set:  # a reused set: this call takes its place (or not), the reservoir's size is unchanged
            if not final and entropy_below(2):
                return
            del stashed[same_set[0]]
        elif final:
            while len(stashed) >= room:
                del stashed[sorted(stashed)[0]]
        elif len(stashed) >= room:
            slot = entropy_below(self.seen)
            if slot >= room:
                return
            del stashed[sorted(stashed)[slot]]
        stashed[index] = ([o.detach().clone() if isinstance(o, torch.Tensor) else o for o in outs], drawn)
        slot_inputs = self.slots[index % len(self.slots)][0]
        aliased = [n for n in input_aliases(outs, self.state.definition, slot_inputs)
                   if n not in self.request.reference_views]
        if aliased:  # judged by value (the copy above); but a call may not write into what it returns
            self.written.update(self.inputs_written(drawn[2], slot_inputs, aliased))

    def inputs_written(self, seed: int, slot_inputs: list, names: list[str]) -> list[str]:
        """Which of `names` (inputs a kept call returned views of) no longer hold the values its seed gives:
        the call wrote into them. Rare (only aliasing calls that are kept), so the set is rebuilt."""
        cached = seed in self.state.inputs_cache
        original = make_call_inputs(self.state, self.request.workload, seed, fresh_copy=False)[2]
        if not cached:
            self.state.inputs_cache.pop(seed, None)
        inputs = list(self.state.definition.inputs)
        return [inputs[k] for k in changed_tensors(original, slot_inputs) if inputs[k] in names]

    def prepare(self, i: int) -> None:
        self.threads.call_returned()
        self.stash_last()
        slot_inputs, slot_outputs = self.slots[i % len(self.slots)]
        if self.fresh and self.first_call is not None and i == 0:
            drawn, source, spent_s = self.first_call
            self.first_call = None
            self.generation_s += spent_s
            self.draws += 1
            self.recent.append((drawn, source))
        elif self.fill_in_place:
            started = _perf_counter()
            drawn, source = self.draw(i), None
            make_inputs(self.state.definition, self.workload, self.axes, seed=drawn[2], device=self.state.device,
                        out=slot_inputs)
            self.generation_s += _perf_counter() - started
        elif self.fresh and (self.generation_s < self.budget_s or self.draws <= self.required
                             or not self.request.reuse_inputs):
            # Past the budget only once more sets were drawn than outputs are required: kept outputs all
            # come from distinct sets, which the orchestrator insists on (check.anticheat).
            started = _perf_counter()
            drawn = self.draw(i)
            while len(self.recent) >= self.recent_limit:  # room first: the new set counts against the budget too
                self.recent.pop(0)
            source = make_call_inputs(self.state, self.request.workload, drawn[2], fresh_copy=False)[2]
            self.state.inputs_cache.pop(drawn[2], None)  # used once: not worth caching
            self.generation_s += _perf_counter() - started
            self.recent.append((drawn, source))
        elif self.fresh:
            # Input generation is slow (custom entrypoints, a CPU): past the budget, calls draw at random
            # from the last few fresh sets; the orchestrator sees it from the sources ("timed_inputs_reused").
            drawn, source = self.recent[entropy_below(len(self.recent))]
            self.reused = True
        else:
            k = i % len(self.sets)
            drawn, source = (k, None, self.seeds[k]), self.sets[k]
        for dst, src in zip(slot_inputs, source or ()):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        if slot_outputs is not None:
            refill_outputs(slot_outputs)
        if self.graphs is not None:
            # A replay must write its outputs: poisoned first, a graph that holds none of the work (it ran
            # on an unjoined stream while being captured) returns NaN instead of a stale answer.
            refill_outputs(self.poisoned[i % len(self.graphs)])
        self.last[2] = drawn
        self.threads.check_idle()

    def fresh_values(self, inputs: list, seed: int) -> None:
        """`seed`'s input set (no call's) written into `inputs`: what a graph is checked on before it is timed."""
        if self.fill_in_place:
            make_inputs(self.state.definition, self.workload, self.axes, seed=seed, device=self.state.device, out=inputs)
            return
        source = make_call_inputs(self.state, self.request.workload, seed, fresh_copy=False)[2]
        for dst, src in zip(inputs, source):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        if tensor_bytes(source) > trim_threshold_bytes(self.state):
            self.state.inputs_cache.pop(seed, None)  # multi-GB: drawn again rather than held beside the graphs

    def draw(self, i: int) -> tuple[int, int, int]:
        """Call i's own fresh set: (source i, a nonce from the OS's entropy, the seed they give)."""
        nonce = entropy_bits(62)
        self.draws += 1
        return i, nonce, call_seed(self.request.block_key, i, nonce)

    def run(self, i: int):
        if self.graphs is not None:  # the same call, replayed from its slot's graph
            graph, result = self.graphs[i % len(self.graphs)]
            graph.replay()
        else:
            slot_inputs, slot_outputs = self.slots[i % len(self.slots)]
            result = invoke(self.state, slot_inputs, slot_outputs)
        self.last[0], self.last[1] = i, result
        return result

    def measure(self, probe: EscapedWorkProbe | None) -> TimingResult:
        """The timed loop (then the probe calls, when asked), and the end-of-block checks."""
        config = self.request.config
        if self.state.is_cuda and config.cuda_graphs and self.graphs is None:
            started = _perf_counter()
            seed = entropy_bits(62)  # a set no call gets, written twice by `fresh_values` (eager, then the replay)
            check = self.fresh and self.request.check_graph_values
            fresh = (lambda inputs: self.fresh_values(inputs, seed)) if check else None
            try:
                self.graphs, note = capture_graphs(self.state, self.slots, fresh)
            finally:
                self.state.inputs_cache.pop(seed, None)
            self.phases_s["capture"] = _perf_counter() - started
            if self.graphs is None:  # nothing more in this process: a failed capture can leave it broken
                raise Failure("RUNTIME_ERROR", f"CUDA graph capture failed: {note}", capture_failed=note)
            self.poisoned = [unaliased_outputs(result, inputs) for (_, result), (inputs, _) in zip(self.graphs, self.slots)]
        elif not (self.state.is_cuda and config.cuda_graphs):
            self.graphs = None
        self.threads.probe = probe  # its CUPTI thread works during the probe calls: not the solution's
        try:
            timing = time_iterations(self.run, self.prepare, self.state.device, config, probe=probe)
            ended = _perf_counter()
            self.threads.call_returned()
            self.state.synchronize()
            self.stash_last(final=True)
            self.threads.check_idle()
            self.threads.check_end()
        except Failure:
            raise
        except torch.cuda.OutOfMemoryError as exc:
            raise Failure("RUNTIME_ERROR", f"out of memory while timing: {exc}") from None
        except Exception as exc:  # noqa: BLE001
            raise Failure("RUNTIME_ERROR", "the solution raised while being timed:\n" + format_exception(exc)) from None
        self.phases_s.update(warmup=timing.warmup_s, loop=timing.wall_s, probe=timing.probe_s)
        self.phases_s["checks"] = _perf_counter() - ended  # the block's end: threads settled, the last output kept
        self.phases_s["inputs_in_loop"] = self.generation_s
        return timing

    def keepable(self) -> bool:
        """Whether the slots (and graphs) may stay for the next block of this workload: only when small
        beside the device (their memory would otherwise crowd the other worker's block)."""
        held = tensor_bytes([t for inputs, outputs in self.slots for t in [*inputs, *(outputs or [])]])
        return held * 2 <= trim_threshold_bytes(self.state)

    def flags(self, timing: TimingResult) -> list[str]:
        flags = list(timing.stats.flags) + ([] if self.fresh else ["timed_inputs_fixed"])
        flags += ["timed_inputs_reused"] if self.reused else []
        flags += ["checked_outputs_capped"] if self.keep > 0 and len(self.stashed) < min(self.keep, self.seen) else []
        flags += ["timed_inputs_single_slot"] if len(self.slots) < 2 else []  # every call saw one address
        return flags


def block_key(state: WorkerState, request: msg.Time) -> str:
    """What a block's slots and graphs depend on: the code, the workload, its input sets, the settings (but
    the warm-up count: a later round warms up with fewer calls, `orchestrator.timed.later_round_timing`)."""
    settings = dict(request.config.to_dict(), warmup=None)
    return json.dumps([id(state.function), state.destination_passing, request.workload.to_dict(), request.seeds,
                       settings, request.max_slots, request.fresh_inputs_budget_s], sort_keys=True)


def handle_time(state: WorkerState, request: msg.Time) -> msg.Timed:
    """Time the call on inputs it has never seen, at fresh addresses; keep sampled outputs. With `probe`,
    the block's last calls are probe calls (`worker.probe`)."""
    started = _perf_counter()
    kept, state.timed_block = state.timed_block, None
    if kept is not None and kept.key == block_key(state, request):
        block = kept
        block.begin(request)
        block.phases_s["setup"] = _perf_counter() - started
    else:
        del kept
        block = TimedBlock(state, request)
    probe = None
    if state.is_cuda and request.probe:
        probe = EscapedWorkProbe(PROBE_CALLS, quiet=lambda: harness_native(state),
                                 warm_call=state.timed_call_ms < WARM_PROBE_BELOW_MS)
    try:
        timing = block.measure(probe)
    finally:
        ended = _perf_counter()
        result = probe.finish() if probe is not None else None
    if result is not None:
        if result.cupti != "used" and state.guard is not None:
            checked = "those calls" if result.cupti.startswith("incomplete") else "escaped work"
            state.guard.note(f"cupti: {result.cupti} ({checked} checked by device synchronisation only)")
        verdict = result.verdict()
        if verdict:
            raise Failure("REWARD_HACK", f"{verdict}\n{result.evidence()}")
    violations = integrity_violations()
    if violations:
        raise Failure("REWARD_HACK", f"timing functions were replaced: {violations}")
    hidden = background_activity(state)
    if hidden:
        raise Failure("REWARD_HACK", hidden)
    block.phases_s["checks"] = block.phases_s.get("checks", 0.0) + _perf_counter() - ended  # probe, integrity, leftovers
    state.timed_call_ms = min(timing.samples_ms) if timing.samples_ms else 0.0
    long_calls = state.timed_call_ms >= request.config.long_call_ms  # short ones: capture again, it costs little
    if not request.probe and long_calls and block.keepable():
        state.timed_block = block  # the next block of this workload (the next round) starts warm
    else:
        block.graphs = None
    sampled = [[i, drawn[0], drawn[1], outs] for i, (outs, drawn) in sorted(block.stashed.items())]
    return msg.Timed(samples_ms=list(timing.samples_ms), warmup=timing.warmup_done, stop_reason=timing.stop_reason,
                     wall_s=timing.wall_s, clocks_before=timing.clocks_before, clocks_after=timing.clocks_after,
                     flags=block.flags(timing), sampled=sampled, slots=len(block.slots),
                     energy_mj_per_call=timing.energy_mj_per_call, host_ms=list(timing.host_ms or []),
                     hold_ms=timing.hold_ms, exposed=timing.exposed, probe_calls=timing.probe_calls,
                     probe=result.to_dict() if result is not None else None, aliased_inputs=sorted(block.aliased),
                     written_inputs=sorted(block.written),
                     phases_s={k: round(v, 4) for k, v in block.phases_s.items()})


def handle_time_and_export(state: WorkerState, request: msg.Time) -> msg.Timed:
    """`handle_time`, with the sampled outputs exported by CUDA IPC when the request asks for it
    (they are the harness's own copies already; see transfer.py)."""
    with harness_native(state):
        transfer.release_all(state)
    reply = handle_time(state, request)
    if request.ipc_min_bytes:
        started = _perf_counter()
        with harness_native(state):
            reply.sampled = [[index, source, nonce, transfer.export_outputs(state, outs, request.ipc_min_bytes, copy=False)]
                             for index, source, nonce, outs in reply.sampled]
        reply.phases_s["export"] = round(_perf_counter() - started, 4)
    return reply
