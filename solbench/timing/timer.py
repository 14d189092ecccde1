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
captured at import into private names, so replacing `torch.cuda.Event.record` or
`time.perf_counter_ns` afterwards changes nothing here, and `integrity_violations()` reports that it
happened. A host wall clock around each timed block catches event times that add up to more than
the time that really passed.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from solbench.spec.trace import LatencyStats
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

# --- captured at import: the solution is loaded later and may patch the public names ---
_perf_counter_ns = time.perf_counter_ns
_sleep = time.sleep
_gc_disable = gc.disable
_gc_enable = gc.enable
_gc_isenabled = gc.isenabled
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed_time = torch.cuda.Event.elapsed_time
_event_synchronize = torch.cuda.Event.synchronize
_event_query = torch.cuda.Event.query
_cuda_synchronize = torch.cuda.synchronize
_cuda_current_stream = torch.cuda.current_stream
_cuda_sleep = torch.cuda._sleep
_CAPTURED: dict[str, tuple[Callable[[], Any], Any]] = {
    "time.perf_counter_ns": (lambda: time.perf_counter_ns, _perf_counter_ns),
    "gc.disable": (lambda: gc.disable, _gc_disable),
    "gc.enable": (lambda: gc.enable, _gc_enable),
    "gc.isenabled": (lambda: gc.isenabled, _gc_isenabled),
    "torch.cuda.Event": (lambda: torch.cuda.Event, _Event),
    "torch.cuda.Event.record": (lambda: _Event.record, _event_record),
    "torch.cuda.Event.elapsed_time": (lambda: _Event.elapsed_time, _event_elapsed_time),
    "torch.cuda.Event.synchronize": (lambda: _Event.synchronize, _event_synchronize),
    "torch.cuda.Event.query": (lambda: _Event.query, _event_query),
    "torch.cuda.synchronize": (lambda: torch.cuda.synchronize, _cuda_synchronize),
    "torch.cuda.current_stream": (lambda: torch.cuda.current_stream, _cuda_current_stream),
    "torch.cuda._sleep": (lambda: torch.cuda._sleep, _cuda_sleep),
    "torch.cuda.streams.Event": (lambda: torch.cuda.streams.Event, _Event),
}
_CUDA_SYNC_PRIMITIVE = getattr(torch._C, "_cuda_synchronize", None)
if _CUDA_SYNC_PRIMITIVE is not None:
    _CAPTURED["torch._C._cuda_synchronize"] = (lambda: getattr(torch._C, "_cuda_synchronize", None),
                                               _CUDA_SYNC_PRIMITIVE)

FLAG_EVENTS_EXCEED_WALL = "events_exceed_wall"
FLAG_LAUNCH_EXPOSED = "launch_exposed"  # > EXPOSED_FRACTION of timed calls launched slower than the hold
FLAG_LAUNCH_BOUND = "launch_bound"  # the host takes longer to issue a call than the GPU to run it
EXPOSED_FRACTION = 0.1
HOLD_MIN_MS = 0.02
HOLD_FACTOR = 1.5  # hold = HOLD_FACTOR x the host's p90 launch time (+ HOLD_MIN_MS)
ASSUMED_MAX_SM_MHZ = 2200  # without NVML: above any current GPU's SM clock, so the spin errs long
FLAG_FUNCTIONS_REPLACED = "timing_functions_replaced"  # integrity_violations() was non-empty after the block
STOP_FIXED = "fixed_iters"  # adaptive off: exactly `iters`
STOP_CI = "ci_target"  # the median's CI reached target_rel_ci
STOP_MAX_ITERS = "max_iters"
STOP_MAX_TIME = "max_time"


def integrity_violations() -> list[str]:
    """Names of timing primitives that were replaced since this module was imported.

    The worker calls this after loading the solution and after each timed block; any entry means
    the solution tampered with the measurement machinery (the timer itself kept using the originals).
    """
    problems = []
    for name, (current, original) in _CAPTURED.items():
        try:
            now = current()
        except Exception:  # a deleted attribute is a replacement too
            now = None
        if now is not original:
            problems.append(name)
    return problems


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
                    timed_ms: float = math.inf) -> tuple[int, str | None]:
    """How many more timed iterations to run, or (0, stop_reason). Pure, so it is tested directly.

    The first batch is `iters`; then, if adaptive, batches of max(batch_min, n/4) until the CI target
    is met together with the block's floor, or `max_iters`, or the time budget (batch shrunk to what is
    predicted to fit) ends it. The floor: calls of `long_call_ms` or more (by their mean, `timed_ms / n`)
    until the samples add up to `min_block_ms`, shorter ones until `short_call_iters` samples.
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
                  else max(0, config.short_call_iters - n_done))
    if rel_halfwidth is not None and rel_halfwidth <= config.target_rel_ci and floor_left <= 0:
        return 0, STOP_CI
    remaining_s = config.max_time_s - elapsed_s
    per_iter_s = elapsed_s / n_done
    if remaining_s <= per_iter_s or remaining_s <= 0:
        return 0, STOP_MAX_TIME
    size = max(config.batch_min, n_done // 4, math.ceil(floor_left))
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


class _Session:
    """State of one `time_iterations` call: the call counter and the device-specific marks."""

    def __init__(self, run, prepare, device: torch.device, flush: Callable[[], None] | None,
                 hold: _LaunchHold | None = None, settle_ms: float = 0.0) -> None:
        self.run = run
        self.prepare = prepare
        self.settle_ns = int(settle_ms * 1e6) if device.type == "cuda" else 0
        self.call_ms = 0.0  # device time of a warm-up call (CUDA), for the settle rule
        self.flush = flush
        self.hold = hold
        self.device = device
        self.is_cuda = device.type == "cuda"
        self.calls = 0
        self.stream = _cuda_current_stream(device) if self.is_cuda else None
        self.starts: list[Any] = []
        self.ends: list[Any] = []
        self.host_ms: list[float] = []
        self.exposed = 0

    def sync(self) -> None:
        if self.is_cuda:
            _cuda_synchronize(self.device)

    def settle(self) -> None:
        """Drain the device, then leave it idle for `settle_ns` (a host spin: sleep overshoots)."""
        _cuda_synchronize(self.device)
        until = _perf_counter_ns() + self.settle_ns
        while _perf_counter_ns() < until:
            pass

    def untimed(self, count: int) -> None:
        """Warm-up calls: the same protocol, no timed marks (the host time still sizes the hold). On CUDA
        the chunk's last call is bracketed by events, read after the caller's sync (`warm_call_ms`)."""
        run, prepare, flush, hold, clock = self.run, self.prepare, self.flush, self.hold, _perf_counter_ns
        host_ns = [0] * count
        if self.is_cuda:
            self.ensure_events(1)
        for j in range(count):
            i = self.calls
            self.calls += 1
            if self.settle_ns:
                self.settle()
            if prepare is not None:
                prepare(i)
            if flush is not None:
                flush()
            if hold is not None:
                hold.spin()
            last = self.is_cuda and j == count - 1
            t0 = clock()
            if last:
                _event_record(self.starts[0], self.stream)
            run(i)
            if last:
                _event_record(self.ends[0], self.stream)
            host_ns[j] = clock() - t0
        if hold is not None:
            hold.grow([t / 1e6 for t in host_ns[1:] or host_ns])  # the first call may compile

    def warm_call_ms(self) -> float:
        """Device time of the last warm-up chunk's last call (after a sync); 0.0 on the CPU."""
        return _event_elapsed_time(self.starts[0], self.ends[0]) if self.is_cuda else 0.0

    def probed(self, probe) -> int:
        """Probe calls (`worker.probe.EscapedWorkProbe`): made exactly as timed calls are, each followed
        by the probe's own checks; they are not samples. Returns how many were made."""
        run, prepare, flush, hold = self.run, self.prepare, self.flush, self.hold
        self.ensure_events(1)
        start, end = self.starts[0], self.ends[0]
        made, t0 = 0, _perf_counter_ns()
        probe.begin()
        while probe.wants_more(made, (_perf_counter_ns() - t0) / 1e9):
            i = self.calls
            self.calls += 1
            if self.settle_ns:
                self.settle()
            if prepare is not None:
                prepare(i)
            if flush is not None:
                flush()
            if hold is not None:
                hold.spin()
            probe.opening()
            probe.started()
            _event_record(start, self.stream)
            run(i)
            _event_record(end, self.stream)
            probe.ended(start, end, self.stream)
            probe.settled(start, end)
            made += 1
        return made

    def ensure_events(self, count: int) -> None:
        """Allocate event pairs outside any timed window; reused across batches."""
        while len(self.starts) < count:
            self.starts.append(_Event(enable_timing=True))
            self.ends.append(_Event(enable_timing=True))

    def timed(self, count: int) -> list[float]:
        """`count` timed calls; returns their times in ms (after one sync for CUDA)."""
        run, prepare, flush = self.run, self.prepare, self.flush
        if self.is_cuda:
            self.ensure_events(count)
            starts, ends, stream, record = self.starts, self.ends, self.stream, _event_record
            hold, clock = self.hold, _perf_counter_ns
            host_ns = [0] * count
            held_ms = hold.ms if hold is not None else 0.0
            for j in range(count):
                i = self.calls
                self.calls += 1
                if self.settle_ns:
                    self.settle()
                if prepare is not None:
                    prepare(i)
                if flush is not None:
                    flush()
                if hold is not None:
                    hold.spin()
                t0 = clock()
                record(starts[j], stream)
                run(i)
                record(ends[j], stream)
                host_ns[j] = clock() - t0
            _event_synchronize(ends[count - 1])
            host_ms = [t / 1e6 for t in host_ns]
            self.host_ms.extend(host_ms)
            if hold is not None:
                if self.settle_ns:  # without the settle the device is still busy: a slow launch exposes nothing
                    self.exposed += sum(1 for t in host_ms if t > held_ms)
                hold.grow(host_ms)
            return [_event_elapsed_time(starts[j], ends[j]) for j in range(count)]
        t0s = [0] * count
        t1s = [0] * count
        clock = _perf_counter_ns
        for j in range(count):
            i = self.calls
            self.calls += 1
            if prepare is not None:
                prepare(i)
            if flush is not None:
                flush()
            t0 = clock()
            run(i)
            t1 = clock()
            t0s[j] = t0
            t1s[j] = t1
        return [(b - a) / 1e6 for a, b in zip(t0s, t1s)]


class _LaunchHold:
    """The GPU spin queued before each call's start event (see the module docstring).

    `torch.cuda._sleep` spins a number of SM clock cycles; they are converted at the GPU's maximum SM
    clock, so at any lower clock the spin only lasts longer. Starts at HOLD_MIN_MS and only grows, to
    HOLD_FACTOR x the 90th percentile of the host launch times seen, capped at `max_ms`.
    """

    def __init__(self, max_ms: float, max_sm_mhz: int | None) -> None:
        self.max_ms = max_ms
        self.cycles_per_ms = 1000 * (max_sm_mhz or ASSUMED_MAX_SM_MHZ)
        self.ms = min(HOLD_MIN_MS, max_ms)
        self._cycles = int(self.ms * self.cycles_per_ms)

    def spin(self) -> None:
        if self._cycles > 0:
            _cuda_sleep(self._cycles)

    def grow(self, host_ms: list[float]) -> None:
        if not host_ms:
            return
        ordered = sorted(host_ms)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        wanted = min(self.max_ms, HOLD_FACTOR * p90 + HOLD_MIN_MS)
        if wanted > self.ms:
            self.ms = wanted
            self._cycles = int(wanted * self.cycles_per_ms)


PLATEAU_READINGS = 5  # polls >= 10 ms apart, so a plateau spans >= 40 ms


PLATEAU_SPREAD = 0.03  # a power-capped clock under a heavy matmul wanders by 1-3% (H100)


def _is_plateau(readings: list[int]) -> bool:
    return max(readings) - min(readings) <= PLATEAU_SPREAD * max(readings)


WARMUP_CHUNK_MS = 10.0  # after the first `warmup` calls, warm-up goes on in chunks of about this long


def _warm_up(session: _Session, config: TimingConfig, telemetry: Telemetry | None) -> tuple[int, str, float]:
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
        if elapsed_s * 1e3 >= config.min_warmup_ms and clock_state != "pending":
            return session.calls, clock_state, elapsed_s
        if session.calls >= 1_000_000:  # a no-op run would otherwise spin here for min_warmup_ms
            return session.calls, clock_state, elapsed_s


def time_iterations(run: Callable[[int], object], prepare: Callable[[int], None] | None,
                    device: torch.device | str | int | None, config: TimingConfig | None = None, *,
                    telemetry: Telemetry | None = None, flusher: L2Flusher | None = None,
                    probe=None) -> TimingResult:
    """Time `run(i)` per call on `device` ("cuda[:n]" uses CUDA events, "cpu" the CPU clock).

    `telemetry` defaults to NVML for CUDA devices (None on CPU); `flusher` defaults to a cached
    per-device `L2Flusher` when `config.l2_flush`. `probe` (CUDA): after the timed calls, probe calls
    under the same protocol (`worker.probe.EscapedWorkProbe`); `TimingResult.probe_calls` counts them.
    """
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
        hold = _LaunchHold(config.max_hold_ms, telemetry.max_sm_clock_mhz() if telemetry is not None else None)
    with device_ctx:
        session = _Session(run, prepare, dev, flush, hold, config.settle_ms)
        try:
            if config.gc_off:
                _gc_disable()
            warmup_done, clock_state, warmup_s = _warm_up(session, config, telemetry)
            if session.call_ms >= config.long_call_ms:
                session.settle_ns = 0  # the idle gap before a call matters to short calls only
            clocks_before = telemetry.read() if telemetry is not None else None
            samples: list[float] = []
            stop_reason = STOP_FIXED
            session.sync()
            t0 = _perf_counter_ns()
            while True:
                elapsed_s = (_perf_counter_ns() - t0) / 1e9
                rel = rel_ci_halfwidth(samples, config.ci_level) if samples else None
                size, reason = next_batch_size(len(samples), elapsed_s, config, rel, math.fsum(samples))
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
