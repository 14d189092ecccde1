"""Timing a workload: interleaved reference and solution blocks on distinct input sets, the sampled timed
outputs judged like a trial, and the baselines (the problem's shipped optimised baseline, torch.compile)
timed in the reference worker."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

from solbench.check.anticheat import input_sets_reused, timed_call_seed
from solbench.inputs.seeds import derive_seed, new_run_seed
from solbench.orchestrator.reuse_key import reuse_key
from solbench.orchestrator.session import StepFailed
from solbench.orchestrator.sizes import declared_set_bytes, expected_outputs, required_checks
from solbench.orchestrator.trials import judge, view_flags
from solbench.orchestrator.verdict import WorkloadRun
from solbench.protocol import messages as msg
from solbench.spec.errors import SpecError
from solbench.spec.problem import Problem, baseline_solution
from solbench.spec.trace import Correctness, Status
from solbench.timing.config import TimingConfig
from solbench.timing.stats import FLAG_FEW_SAMPLES, median_ci_ranks, paired_speedup, summarize


@dataclass
class TimedSamples:
    """Everything the timed blocks of one workload measured, over all rounds."""

    candidate_ms: list[float] = field(default_factory=list)
    reference_ms: list[float] = field(default_factory=list)
    # each round's samples, in the order the blocks ran (reference, then solution, per round): pairs for a
    # speedup that a level shift of the machine between rounds does not move (`stats.paired_speedup`); the
    # reference's stay empty where a service reused its samples
    candidate_rounds: list[list[float]] = field(default_factory=list)
    reference_rounds: list[list[float]] = field(default_factory=list)
    host_ms: list[float] = field(default_factory=list)
    probes: list[dict] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)
    last_reply: msg.Timed | None = None  # the solution's last block (warm-up count, clocks)
    reference_reused: bool = False  # the reference's own block ran past its input budget (a trusted fact)
    reference_fixed: bool | None = None  # its inputs did not depend on the seed (None: the reference was not timed)

    def paired_speedup(self) -> float | None:
        """The median of the rounds' reference/solution ratios (`stats.paired_speedup`): None where the
        reference was not timed beside every solution round (a service's reused samples, a failed block)."""
        return paired_speedup(self.reference_rounds, self.candidate_rounds)


# Argument slots per timed block, by the call's length (seconds at least, slots): enough for short calls to
# see a new address on every call; longer calls rotate fewer, since each slot costs a warm call and a CUDA
# graph capture (a 60 ms call: about 0.1 s a slot). Inputs are fresh values on every call however many
# slots there are, so no answer can be cached by address, and with two a call never sees the address of
# the call before it.
SLOTS_BY_CALL_S = ((10e-3, 2), (1e-3, 4), (0.0, 8))


# CPU: the host's speed changes in episodes of 0.1-0.5 s (other tenants of the machine; docs/timing.md, "CPU
# timings"). Calls shorter than CPU_INTERLEAVE_BELOW_S are timed in CPU_ROUNDS interleaved blocks per side,
# sharing one block's budget, so that both sides sample the same episodes; longer calls span them themselves.
CPU_ROUNDS = 6
CPU_INTERLEAVE_BELOW_S = 0.02
GPU_ROUNDS = 2


def timing_rounds(rounds: int | None, device: str, call_s: float) -> int:
    """Interleaved reference/solution blocks per workload: the run's `--timing-rounds`, else the device's."""
    if rounds is not None:  # RunConfig refuses fewer than 1
        return rounds
    if device.startswith("cuda"):
        return GPU_ROUNDS
    return CPU_ROUNDS if call_s < CPU_INTERLEAVE_BELOW_S else 1


def block_timing(timing: TimingConfig, rounds: int, call_s: float, device: str) -> TimingConfig:
    """One block's settings: the rounds share one block's floors (on the CPU its budgets too), and for
    calls of `long_call_ms` or more each block stops at sqrt(rounds) x the CI target.

    The latency is the median of every round's samples together. Its floors (`iters`, `short_call_iters`,
    `min_block_ms`) are what the workload measures at least, so each of the `rounds` blocks takes its share
    of them. An adaptive block on a GPU never takes fewer calls than a CI of its own needs (`least_for_ci`),
    so it still stops on its CI; one that the power limit ends before its CI keeps the whole `iters`
    (`capped_iters`: the count is all its median rests on there). For long calls the pooled median's CI is
    about 1/sqrt(rounds) of one block's, so each block stops at sqrt(rounds) x the target. Short calls keep
    the whole target per block: their samples are cheap, and a block's level can differ from the next one's
    by a few percent (docs/timing.md). On the CPU the rounds also share one block's caps (a smoke test's
    cost, spread over more blocks); a GPU block keeps its `max_iters` and `max_time_s`, the caps for a call
    whose CI is slow to tighten."""
    if rounds > 1:
        least = least_for_ci(timing.ci_level) if device.startswith("cuda") and timing.adaptive else 1
        iters = max(least, -(-timing.iters // rounds))
        timing = replace(timing, iters=iters, short_call_iters=max(least, -(-timing.short_call_iters // rounds)),
                         min_block_ms=timing.min_block_ms / rounds, capped_iters=max(timing.capped_iters, timing.iters))
    if rounds > 1 and not device.startswith("cuda"):
        timing = replace(timing, max_iters=max(timing.iters, -(-timing.max_iters // rounds)),
                         max_time_s=timing.max_time_s / rounds, short_block_ms=timing.short_block_ms / rounds)
    if rounds > 1 and call_s * 1e3 >= timing.long_call_ms:
        return replace(timing, target_rel_ci=timing.target_rel_ci * math.sqrt(rounds))
    return timing


def least_for_ci(level: float) -> int:
    """The fewest samples with a distribution-free CI of the median at `level` (6 at 95%)."""
    return next(n for n in itertools.count(1) if median_ci_ranks(n, level) is not None)  # ends: level < 1


def later_round_timing(timing: TimingConfig) -> TimingConfig:
    """Blocks after a side's first warm up with at least one call rather than `warmup`: the worker ran the
    same call in its block before (allocator, lazy loading and compilation are warm; on a GPU a call of a
    millisecond or more even keeps its argument slots and CUDA graphs). They still warm up for
    `min_warmup_ms`, and on a GPU until the SM clock is at its working level: the other side's block ran
    between them. On the CPU that time matters: the other side's block left its own code and data in the
    caches, and a short call needs many calls to bring its own back (with one call, the norms' medians read
    10-30% higher on an H200 host's CPU). A long call meets the time with that one call."""
    return replace(timing, warmup=min(timing.warmup, 1))


def slots_for(call_s: float) -> int:
    return next((slots for least_s, slots in SLOTS_BY_CALL_S if call_s >= least_s), SLOTS_BY_CALL_S[-1][1])


def with_graph_note(run: WorkloadRun, reply: msg.Timed, prefix: str, limit: int) -> None:
    """Once per workload, why a block asked to replay a CUDA graph was timed as launched."""
    if reply.graph_note:
        run.warn_once(f"{prefix}{reply.graph_note[:limit]}")


def time_rounds(run: WorkloadRun, reference_aliases: set[str], correctness: Correctness) -> TimedSamples:
    """Interleaved reference/solution blocks; each solution block's sampled outputs are judged.

    The workload ends (`WorkloadEnded`) when a kept timed call wrote into an input it returned a view of
    (the reference does not), or a sampled output is wrong although the trials passed. The orchestrator
    owns what the judge relies on: each block's seed key, whether sets may be reused (only where the
    reference's block had to), and the seed of every checked call (`check.anticheat.timed_call_seed`).
    """
    session, config, problem, workload = run.session, run.config, run.problem, run.workload
    seeds = [derive_seed(run.run_seed, workload.uuid, "timed", s) for s in range(config.timed_input_sets)]
    rounds = timing_rounds(config.timing_rounds, session.device, run.call_s)
    timing = block_timing(config.timing_config(session.device), rounds, run.call_s, session.device)
    set_bytes = declared_set_bytes(problem, workload)
    per_round_checks = -(-config.checked_timed_outputs // rounds)
    samples = TimedSamples()
    time_reference = config.time_reference
    slots = slots_for(run.call_s)
    eager = None  # (cache, key) where a service reuses the eager reference's samples (its default)
    if time_reference and getattr(session, "reuse_eager_reference", False):
        eager = _service_cache(run, "eager", f"{timing!r} sets={config.timed_input_sets} slots={slots} "
                                             f"rounds={rounds} budget={config.fresh_inputs_budget_s}")
    if eager is not None and _reuse_eager(run, eager, samples):
        time_reference = False
    later = later_round_timing(timing)
    for round_ in range(rounds):
        block = timing if round_ == 0 else later
        if time_reference:
            time_reference = _time_reference_block(run, seeds, block, set_bytes, samples, slots)
        session.trim(session.reference, set_bytes)
        # The escaped-work probe: the last calls of the solution's last block (worker.probe).
        request = msg.Time(workload=run.workload, seeds=seeds, config=block, checked_outputs=per_round_checks,
                           required_outputs=required_checks(problem, workload, per_round_checks),
                           fresh_inputs_budget_s=config.fresh_inputs_budget_s, ipc_min_bytes=session.ipc_min_bytes(),
                           probe=round_ == rounds - 1, max_slots=slots, block_key=new_run_seed(),
                           reuse_inputs=samples.reference_reused, reference_views=sorted(reference_aliases),
                           fixed_inputs=samples.reference_fixed is not False or config.fresh_inputs_budget_s == 0)
        reply = session.ask_timed(session.candidate, request, config.timeout_s)
        samples.candidate_ms += reply.samples_ms
        samples.candidate_rounds.append(list(reply.samples_ms))
        with_graph_note(run, reply, "CUDA graph: ", 400)
        samples.host_ms += [float(t) for t in reply.host_ms]
        samples.probes += [reply.probe] if isinstance(reply.probe, dict) else []
        # A block too short for a CI of its own (a CPU round of a few calls) is not a flag: the pooled samples'
        # statistics say whether the workload has enough (evaluate._finish).
        samples.flags.update(set(reply.flags) - {FLAG_FEW_SAMPLES})
        samples.flags.update(["timed_inputs_reused"] if input_sets_reused(reply.sampled) else [])
        samples.last_reply = reply
        samples.flags.update(view_flags(set(reply.aliased_inputs) - reference_aliases))
        written = sorted(set(reply.written_inputs) - reference_aliases)
        if written:
            raise run.end(Status.REWARD_HACK, f"timed calls wrote into their inputs {written} and returned views "
                                              f"of them, which the reference does not do")
        session.trim(session.candidate, set_bytes)
        _judge_sampled(run, reply, request, correctness)
    if eager is not None and time_reference and samples.reference_ms:  # measured now, every round: kept
        cache, key = eager
        cache.put(key, {"samples_ms": samples.reference_ms, "inputs_reused": samples.reference_reused,
                        "inputs_fixed": samples.reference_fixed})
    return samples


def _service_cache(run: WorkloadRun, kind: str, settings: str) -> tuple | None:
    """(cache, key) of a reference time of `kind` where a service keeps them (`serve.reference_cache`: set as
    the session's `reference_timings` by a service, absent elsewhere), else None."""
    cache = getattr(run.session, "reference_timings", None)
    if cache is None:
        return None
    return cache, reuse_key(run.problem, run.workload, kind, run.session.device, run.config.lock_clocks, settings,
                            run.config.all_data_roots(run.problem.directory))


def _reuse_eager(run: WorkloadRun, eager: tuple, samples: TimedSamples) -> bool:
    """Whether the service had the eager reference's samples for these facts; if so they, and what the
    reference's blocks reported about their inputs (trusted facts the solution's blocks follow), are in
    `samples`, and the trace says so."""
    cache, key = eager
    record = cache.get(key)
    measured = record.get("samples_ms") if isinstance(record, dict) else None
    if not measured or not all(isinstance(t, (int, float)) and math.isfinite(t) for t in measured):
        return False  # none kept, or not a record this service wrote: measured again
    if not isinstance(record.get("inputs_reused"), bool) or not isinstance(record.get("inputs_fixed"), bool):
        return False  # the input facts the candidate's blocks follow must be what the reference's blocks found
    samples.reference_ms = [float(t) for t in measured]
    samples.reference_reused = record["inputs_reused"]
    samples.reference_fixed = record["inputs_fixed"]
    run.warnings.append("eager reference time reused from this service's earlier measurement of the same definition "
                        "and workload content on the same GPU, clocks, versions and settings, not interleaved with this solution's blocks (a service started "
                        "with --no-reuse-eager-reference times it again)")
    return True


def _time_reference_block(run: WorkloadRun, seeds: list[int], timing: TimingConfig, set_bytes: int,
                          samples: TimedSamples, slots: int) -> bool:
    """One reference block (trusted code: no probe); False (and a warning) when the reference cannot be timed."""
    session = run.session
    session.trim(session.candidate, set_bytes)
    try:
        reply = session.ask_timed(session.reference, msg.Time(workload=run.workload, seeds=seeds, config=timing,
                                                              checked_outputs=0, probe=False, max_slots=slots,
                                                              fresh_inputs_budget_s=run.config.fresh_inputs_budget_s,
                                                              check_graph_values=False),
                                  run.config.timeout_s)
    except StepFailed as exc:
        run.warnings.append(f"reference timing failed ({exc.status.value}): {exc.log.strip()[-300:]}; "
                            "no speedup reported")
        samples.reference_ms, samples.reference_rounds = [], []
        return False
    samples.reference_ms += reply.samples_ms
    samples.reference_rounds.append(list(reply.samples_ms))
    samples.reference_reused = samples.reference_reused or "timed_inputs_reused" in reply.flags
    samples.reference_fixed = "timed_inputs_fixed" in reply.flags
    with_graph_note(run, reply, "reference timed as launched: CUDA graph ", 300)
    return True


def _judge_sampled(run: WorkloadRun, reply: msg.Timed, request: msg.Time, correctness: Correctness) -> None:
    """Every sampled timed output, judged against the reference on that call's inputs, whose seed the
    orchestrator derives itself (`check.anticheat.timed_call_seed`; the reply's form was checked)."""
    expected = expected_outputs(run.problem, run.workload)
    for entry in reply.sampled:
        index, outputs = entry[0], entry[3]
        input_seed = timed_call_seed(entry, request.block_key, request.seeds)
        status, result, _ = judge(run.session, run.workload, input_seed, outputs, run.config.timeout_s, expected,
                                  strict=run.config.strict)
        correctness.checked_timed_iterations += 1
        if status != Status.PASSED:
            raise run.end(status, f"the output of timed iteration {index} is wrong although the correctness trials "
                                  f"passed (answers cached or work skipped while timed?): "
                                  f"{result.message or status.value}", correctness=result)


def time_baselines(run: WorkloadRun, reference_ms: float | None, method: str) -> dict[str, float | None]:
    """The baseline times a score can be anchored on: the eager reference, a published time, the shipped
    optimised baseline and torch.compile of the reference (None where unavailable, with a warning)."""
    session, config, problem = run.session, run.config, run.problem
    seeds = [derive_seed(run.run_seed, run.workload.uuid, "timed", s) for s in range(config.timed_input_sets)]
    timing = config.timing_config(session.device)
    baselines = {"eager": reference_ms, "published": config.baseline_ms.get(run.workload.uuid),
                 "shipped": None, "compile": None}
    if (config.baseline_shipped and problem.baseline_path is not None) or config.baseline_compile:
        session.trim(session.candidate, declared_set_bytes(problem, run.workload))
    if config.baseline_shipped and problem.baseline_path is not None:
        baselines["shipped"] = _reused(run, "shipped", timing,
                                       lambda: _time_shipped(run, problem, seeds, timing, method))
    if config.baseline_compile:
        baselines["compile"] = _reused(run, "compile", timing, lambda: _time_compiled(run, seeds, timing, method))
    return baselines


def _reused(run: WorkloadRun, kind: str, timing: TimingConfig, measure) -> float | None:
    """A baseline's median, measured by `measure`, or the one a service measured before on the same facts."""
    kept = _service_cache(run, kind, f"{timing!r} sets={run.config.timed_input_sets}")
    if kept is None:
        return measure()
    cache, key = kept
    found = cache.get(key)
    if isinstance(found, (int, float)):
        run.warnings.append(f"{kind} baseline time reused from this service's earlier measurement of the same "
                            f"definition and workload content on the same GPU, clocks, versions and settings")
        return found
    measured = measure()
    if measured is not None:
        cache.put(key, measured)
    return measured


def _time_compiled(run: WorkloadRun, seeds: list[int], timing: TimingConfig, method: str) -> float | None:
    """The median time of torch.compile of the reference; None (and a warning saying why) when unavailable."""
    try:
        reply = run.session.ask_timed(run.session.reference,
                                      msg.TimeCompiled(workload=run.workload, seeds=seeds, config=timing, checked_outputs=0,
                                                       check_graph_values=False),
                                      run.config.compile_timeout_s)
    except StepFailed as exc:
        run.warnings.append(f"torch.compile baseline unavailable ({exc.status.value}): {exc.log.strip()[-300:]}")
        return None
    return summarize(reply.samples_ms, method=method).median_ms


def _time_shipped(run: WorkloadRun, problem: Problem, seeds: list[int], timing: TimingConfig,
                  method: str) -> float | None:
    """The median time of the problem's shipped optimised baseline, timed in the reference worker
    after it agreed with the reference; None (and a warning saying why) when it is unavailable."""
    try:
        solution = baseline_solution(problem)
        reply = run.session.ask_timed(run.session.reference,
                                      msg.TimeBaseline(workload=run.workload, seeds=seeds, config=timing, checked_outputs=0,
                                                       baseline=solution, check_graph_values=False,
                                                       compile_timeout_s=run.config.compile_timeout_s),
                                      run.config.compile_timeout_s)
    except SpecError as exc:
        run.warnings.append(f"shipped baseline unusable: {exc}")
        return None
    except StepFailed as exc:
        run.warnings.append(f"shipped baseline unavailable ({exc.status.value}): {exc.log.strip()[-300:]}")
        return None
    return summarize(reply.samples_ms, method=method).median_ms
