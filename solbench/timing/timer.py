"""Timing a callable: warm-up, per-iteration CUDA events (or the CPU clock), adaptive stopping.

Protocol for each call i (warm-up and timed alike): on CUDA a settle (drain, then idle `settle_ms`),
then `prepare(i)` (caller puts iteration i's inputs at fresh addresses), then the cache flush, then on
CUDA the launch hold, then -- only for timed calls -- start mark, `run(i)`, end mark. `i` counts every call, warm-up first; callers map it onto
their input rotation modulo its size. On CUDA the marks are events recorded on the current stream:
no host sync inside a window, one sync per batch to read the events.

The launch hold is a GPU spin queued after the flush, sized to outlast the host's time to queue the
start event, the call and the end event (measured every call; the hold only grows). The GPU reaches
the start event with the whole call already queued, so the event time is the device's time for the
call -- what it costs inside a model whose CPU runs ahead or whose kernels are in a CUDA graph --
and not the Python launch latency of this host, which depends on the CPU, its load and the
interpreter and drifts from run to run. That host time is measured too (`host_ms`), and calls whose
launch outlasted the hold are counted (`exposed`): their event time includes host latency.

Robustness against the code being timed (it shares this process): the functions used here are
captured at import into private names (`captured.py`), so replacing `torch.cuda.Event.record` or
`time.perf_counter_ns` afterwards changes nothing here, and `integrity_violations()` reports that it
happened. A host wall clock around each timed block catches event times that add up to more than
the time that really passed. The calls of a block, under that protocol, are `call_loop.CallSession`'s.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from solbench.spec.trace import LatencyStats
from solbench.timing.call_loop import CallSession, LaunchHold
from solbench.timing.captured import (
    _CAPTURED,  # noqa: F401 - the worker's integrity snapshot names it here (`worker.main`)
    FLAG_FUNCTIONS_REPLACED,
    _event_query,
    _gc_disable,
    _gc_enable,
    _gc_isenabled,
    _perf_counter_ns,
    _sleep,
    integrity_violations,
)
from solbench.timing.config import TimingConfig
from solbench.timing.l2_flush import L2Flusher
from solbench.timing.stats import rel_ci_halfwidth, summarize
from solbench.timing.telemetry import (
    FLAG_THROTTLED,
    Telemetry,
    energy_per_call_mj,
    is_throttled,
    telemetry_for,
)

FLAG_EVENTS_EXCEED_WALL = "events_exceed_wall"
FLAG_LAUNCH_EXPOSED = "launch_exposed"  # > EXPOSED_FRACTION of timed calls launched slower than the hold
FLAG_LAUNCH_BOUND = "launch_bound"  # the host takes longer to issue a call than the GPU to run it
EXPOSED_FRACTION = 0.1
STOP_FIXED = "fixed_iters"  # adaptive off: exactly `iters`
STOP_CI = "ci_target"  # the median's CI reached target_rel_ci
STOP_MAX_ITERS = "max_iters"
STOP_MAX_TIME = "max_time"
STOP_POWER_CAP = "power_cap"  # long calls on a board held at its power or thermal limit: the floor met, the CI waived
FLAG_POWER_CAPPED = "power_capped"
# CPU: the calls' median wall time was over CONTENDED_RATIO x their median sample (CPU time): they waited for a
# core, another process had it. The samples leave the wait out, not the caches and memory bandwidth shared.
FLAG_CPU_CONTENDED = "cpu_contended"
CONTENDED_RATIO = 1.5
# CPU: over half of the timed calls page-faulted: the memory they ran in was still growing after warm-up
# (`memory_warmup_timeout_s`), or the call itself maps fresh memory every time. Their samples count it.
FLAG_CPU_PAGE_FAULTS = "cpu_page_faults"


@dataclass
class TimingResult:
    samples_ms: list[float]
    stats: LatencyStats
    warmup_done: int
    stop_reason: str
    wall_s: float  # host wall time around the timed block, including prepare/flush and syncs
    clocks_before: dict[str, Any] | None = None
    clocks_after: dict[str, Any] | None = None
    events_total_ms: float = 0.0  # sum of per-iteration times; compared with wall_s
    clock_warmup: str = "off"  # "off", "unavailable", "reached", "plateau", "timeout"
    warmup_s: float = 0.0
    energy_mj_per_call: float | None = None
    host_ms: list[float] | None = None  # CUDA: host time to queue each timed call (start mark to end mark)
    hold_ms: float = 0.0  # CUDA: the launch hold at the end of the block
    exposed: int = 0  # CUDA: timed calls whose launch outlasted the hold in force
    probe_calls: int = 0  # calls made after the timed ones for the escaped-work probe (not samples)
    probe_s: float = 0.0

    @property
    def flags(self) -> list[str]:
        return self.stats.flags


def events_exceed_wall(events_total_ms: float, wall_s: float, config: TimingConfig) -> bool:
    """Iteration times are measured inside the wall window, so their sum cannot honestly exceed it."""
    wall_ms = wall_s * 1e3
    return events_total_ms > wall_ms * (1.0 + config.wall_margin_rel) + config.wall_margin_ms


def next_batch_size(n_done: int, elapsed_s: float, config: TimingConfig, rel_halfwidth: float | None,
                    timed_ms: float = math.inf, capped: Callable[[], bool] | None = None) -> tuple[int, str | None]:
    """How many more timed iterations to run, or (0, stop_reason). Pure but for `capped`, so it is tested directly.

    The first batch is `iters`; then, if adaptive, batches of max(batch_min, n/4) until the CI target
    is met together with the block's floor, or `max_iters`, or the time budget (batch shrunk to what is
    predicted to fit) ends it. The floor: calls of `long_call_ms` or more (by their mean, `timed_ms / n`)
    until the samples add up to `min_block_ms`, shorter ones until `short_call_iters` samples that add up to
    `short_block_ms`. Long calls also stop at their floor when `capped()` says the board holds its clock at a
    power or thermal limit (asked only then): the spread is the power controller's, and more samples do not make the median
    repeat between runs (docs/timing.md, "Long calls at the power limit"); with at least `capped_iters` samples,
    since the CI no longer bounds them.
    """
    if n_done == 0:
        return config.iters, None
    if n_done >= config.max_iters:
        return 0, STOP_MAX_ITERS if config.adaptive else STOP_FIXED
    if not config.adaptive:
        return 0, STOP_FIXED
    mean_ms = timed_ms / n_done
    long_calls = mean_ms >= config.long_call_ms
    floor_left = (max(0.0, config.min_block_ms - timed_ms) / mean_ms if long_calls
                  else max(config.short_call_iters - n_done, (config.short_block_ms - timed_ms) / max(mean_ms, 1e-9)))
    to_capped = 0  # calls still owed before a capped board may end the block (`capped_iters`)
    if floor_left <= 0:
        if rel_halfwidth is not None and rel_halfwidth <= config.target_rel_ci:
            return 0, STOP_CI
        if long_calls and capped is not None and capped():
            if n_done >= config.capped_iters:
                return 0, STOP_POWER_CAP
            to_capped = config.capped_iters - n_done
    remaining_s = config.max_time_s - elapsed_s
    per_iter_s = elapsed_s / n_done
    if remaining_s <= per_iter_s or remaining_s <= 0:
        return 0, STOP_MAX_TIME
    size = to_capped or max(config.batch_min, n_done // 4, math.ceil(floor_left))
    if per_iter_s > 0:
        size = min(size, int(remaining_s / per_iter_s))
    return max(1, min(size, config.max_iters - n_done)), None


def resolve_device(device: torch.device | str | int | None) -> torch.device:
    """Normalise to torch.device with an explicit index for CUDA."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(device, int):
        device = torch.device("cuda", device)
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


_FLUSHERS: dict[str, L2Flusher] = {}


def flusher_for(device: torch.device, mode: str = "read") -> L2Flusher:
    """The cached per-device, per-mode flusher (one buffer each), shared with the escaped-work probe."""
    key = f"{device}/{mode}"
    if key not in _FLUSHERS:
        _FLUSHERS[key] = L2Flusher(device, mode=mode)  # a CPU flusher ignores the mode
    return _FLUSHERS[key]


PLATEAU_READINGS = 5  # polls >= 10 ms apart, so a plateau spans >= 40 ms
PLATEAU_SPREAD = 0.03  # a power-capped clock under a heavy matmul wanders by 1-3% (H100)


def _is_plateau(readings: list[int]) -> bool:
    return max(readings) - min(readings) <= PLATEAU_SPREAD * max(readings)


def power_capped_reader(telemetry: Telemetry | None, before: dict[str, Any] | None) -> Callable[[], bool]:
    """Whether the board holds its SM clock at a power or thermal limit: the reading taken after the
    warm-up, else one reading when first asked (after a batch of this block's calls). Asked only by a
    block of long calls whose floor is met and whose CI is not; without NVML, never (the CI decides)."""
    answer: list[bool] = []

    def capped() -> bool:
        if not answer:
            answer.append(is_throttled(before, include_power_cap=True) or (
                telemetry is not None and is_throttled(telemetry.read(), include_power_cap=True)))
        return answer[0]
    return capped


def cpu_contended(wall_ms: list[float], median_ms: float) -> bool:
    """CPU: whether the calls' median wall time exceeded their median sample (CPU time) by CONTENDED_RATIO."""
    return bool(wall_ms) and statistics.median(wall_ms) > CONTENDED_RATIO * median_ms


def cpu_flags(session: CallSession, median_ms: float, samples: int) -> list[str]:
    """CPU: `cpu_contended` (the calls waited for a core) and `cpu_page_faults` (most timed calls faulted)."""
    return ([FLAG_CPU_CONTENDED] if cpu_contended(session.wall_ms, median_ms) else []) \
        + ([FLAG_CPU_PAGE_FAULTS] if session.faulted_calls * 2 > samples else [])


WARMUP_CHUNK_MS = 10.0  # after the first `warmup` calls, warm-up goes on in chunks of about this long
# CPU: warm-up goes on (up to `memory_warmup_timeout_s`) until this many calls in a row took no page fault. The
# harness keeps a few fresh input sets and sampled outputs between calls, and the allocator's heap grows
# for several calls after that starts (faulting in pages a call then writes): a call that faults runs 2-6x
# slower, and a block of ten samples taken meanwhile read the reference 0.13x "faster than itself".
STEADY_CALLS = 3


def _warm_up(session: CallSession, config: TimingConfig, telemetry: Telemetry | None) -> tuple[int, str, float]:
    """At least `warmup` calls and `min_warmup_ms`; with clock warm-up, until the SM clock reaches
    its working level or plateaus (polled while the GPU is busy, about every 10 ms), bounded by the
    timeout. Chunks after the first last about WARMUP_CHUNK_MS, so a long call is not repeated ten
    times between two readings of the clock."""
    start_ns = _perf_counter_ns()
    max_mhz = telemetry.max_sm_clock_mhz() if telemetry is not None else None
    clock_state = "off"
    if session.is_cuda and config.clock_warmup:
        clock_state = "unavailable" if max_mhz is None else "pending"
    readings: list[int] = []
    last_poll_ns = 0
    count = max(1, config.warmup)
    while True:
        chunk_start_ns = _perf_counter_ns()
        session.untimed(count)
        # Poll about every 10 ms for as long as the queued chunk runs (one poll per chunk made a 60 ms
        # call repeat 6 times before a plateau could show); never on an idle GPU, whose clock drops.
        while clock_state == "pending":
            if _perf_counter_ns() - last_poll_ns >= 10_000_000:
                last_poll_ns = _perf_counter_ns()
                mhz = telemetry.sm_clock_mhz()
                if mhz is not None:
                    readings.append(mhz)
                    if mhz >= config.clock_working_fraction * max_mhz:
                        clock_state = "reached"
                    elif len(readings) >= PLATEAU_READINGS and _is_plateau(readings[-PLATEAU_READINGS:]):
                        clock_state = "plateau"
            if clock_state != "pending" or _event_query(session.ends[0]):
                break
            _sleep(0.001)
        session.sync()
        session.call_ms = session.warm_call_ms()
        chunk_ms = (_perf_counter_ns() - chunk_start_ns) / 1e6
        count = max(1, int(WARMUP_CHUNK_MS / max(chunk_ms / count, 1e-3)))
        elapsed_s = (_perf_counter_ns() - start_ns) / 1e9
        if clock_state == "pending" and elapsed_s >= config.clock_warmup_timeout_s:
            clock_state = "timeout"
        memory_growing = (not session.is_cuda and session.fault_free_streak < STEADY_CALLS
                          and elapsed_s < config.memory_warmup_timeout_s)
        if elapsed_s * 1e3 >= config.min_warmup_ms and clock_state != "pending" and not memory_growing:
            return session.calls, clock_state, elapsed_s
        if session.calls >= 1_000_000:  # a no-op run would otherwise spin here for min_warmup_ms
            return session.calls, clock_state, elapsed_s


def time_iterations(run: Callable[[int], object], prepare: Callable[[int], None] | None,
                    device: torch.device | str | int | None, config: TimingConfig | None = None, *,
                    telemetry: Telemetry | None = None, flusher: L2Flusher | None = None,
                    probe=None) -> TimingResult:
    """Time `run(i)` per call on `device` ("cuda[:n]" uses CUDA events, "cpu" the CPU clock).

    `telemetry`: NVML for CUDA devices by default; `flusher`: the cached per-device `L2Flusher`. `probe` (CUDA):
    probe calls after the timed ones, under the same protocol (`worker.probe`), counted in `probe_calls`."""
    dev = resolve_device(device)
    config = config if config is not None else TimingConfig.for_device(dev)
    is_cuda = dev.type == "cuda"
    if telemetry is None and is_cuda:
        telemetry = telemetry_for(dev.index)
    flush = None
    if config.l2_flush:
        flush = (flusher if flusher is not None else flusher_for(dev, config.l2_flush_mode)).flush
    method = "cuda_events" if is_cuda else "cpu_clock"

    device_ctx = torch.cuda.device(dev) if is_cuda else contextlib.nullcontext()
    gc_was_enabled = _gc_isenabled()
    hold = None
    if is_cuda and config.launch_hold and config.max_hold_ms > 0:
        hold = LaunchHold(config.max_hold_ms, telemetry.max_sm_clock_mhz() if telemetry is not None else None)
    with device_ctx:
        session = CallSession(run, prepare, dev, flush, hold, config.settle_ms)
        try:
            if config.gc_off:
                _gc_disable()
            warmup_done, clock_state, warmup_s = _warm_up(session, config, telemetry)
            if session.call_ms >= config.long_call_ms:
                session.settle_ns = 0  # the idle gap before a call matters to short calls only
            clocks_before = telemetry.read() if telemetry is not None else None
            samples: list[float] = []
            stop_reason = STOP_FIXED
            capped = power_capped_reader(telemetry, clocks_before) if config.power_cap_stop else None
            session.sync()
            t0 = _perf_counter_ns()
            while True:
                elapsed_s = (_perf_counter_ns() - t0) / 1e9
                rel = rel_ci_halfwidth(samples, config.ci_level) if samples else None
                size, reason = next_batch_size(len(samples), elapsed_s, config, rel, math.fsum(samples), capped)
                if size == 0:
                    stop_reason = reason or STOP_FIXED
                    break
                samples.extend(session.timed(size))
            session.sync()
            wall_s = (_perf_counter_ns() - t0) / 1e9
            probe_started_ns = _perf_counter_ns()
            probe_calls = session.probed(probe) if probe is not None and is_cuda else 0
            probe_s = (_perf_counter_ns() - probe_started_ns) / 1e9
        finally:
            if config.gc_off and gc_was_enabled:
                _gc_enable()
        clocks_after = telemetry.read() if telemetry is not None else None

    events_total_ms = math.fsum(samples)
    stats = summarize(samples, warmup=warmup_done, method=method, ci_level=config.ci_level,
                      target_rel_ci=config.target_rel_ci)
    if events_exceed_wall(events_total_ms, wall_s, config):
        stats.flags.append(FLAG_EVENTS_EXCEED_WALL)
    if is_throttled(clocks_before) or is_throttled(clocks_after):
        stats.flags.append(FLAG_THROTTLED)
    stats.flags += [FLAG_POWER_CAPPED] if stop_reason == STOP_POWER_CAP else []
    stats.flags += [] if is_cuda else cpu_flags(session, stats.median_ms, len(samples))
    host_ms = session.host_ms if is_cuda else None
    if host_ms and stats.median_ms > 0:
        if hold is not None and session.exposed > EXPOSED_FRACTION * len(samples):
            stats.flags.append(FLAG_LAUNCH_EXPOSED)
        if statistics.median(host_ms) > stats.median_ms:
            stats.flags.append(FLAG_LAUNCH_BOUND)
    if integrity_violations():
        stats.flags.append(FLAG_FUNCTIONS_REPLACED)
    return TimingResult(
        samples_ms=samples, stats=stats, warmup_done=warmup_done, stop_reason=stop_reason, wall_s=wall_s,
        clocks_before=clocks_before, clocks_after=clocks_after, events_total_ms=events_total_ms,
        clock_warmup=clock_state, warmup_s=warmup_s,
        energy_mj_per_call=energy_per_call_mj(clocks_before, clocks_after, len(samples)),
        host_ms=host_ms, hold_ms=hold.ms if hold is not None else 0.0, exposed=session.exposed,
        probe_calls=probe_calls, probe_s=probe_s,
    )
