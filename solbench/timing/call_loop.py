"""The calls of one timed block, each under the same protocol, and the launch hold queued before them.

Every call, warm-up, timed or probe alike, begins the same way (`CallSession.begin_call`): on CUDA a
settle, then `prepare(i)`, the cache flush and the launch hold; only then do the three kinds differ
(no marks, marks read as samples, marks handed to the probe). See `solbench.timing.timer` for the
protocol as a whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from solbench.timing.captured import (
    _cuda_current_stream,
    _cuda_sleep,
    _cuda_synchronize,
    _Event,
    _event_elapsed_time,
    _event_record,
    _event_synchronize,
    _minor_faults,
    _perf_counter_ns,
    _process_cpu_ns,
)

HOLD_MIN_MS = 0.02
HOLD_FACTOR = 1.5  # hold = HOLD_FACTOR x the host's p90 launch time (+ HOLD_MIN_MS)
ASSUMED_MAX_SM_MHZ = 2200  # without NVML: above any current GPU's SM clock, so the spin errs long


class LaunchHold:
    """The GPU spin queued before each call's start event (see `solbench.timing.timer`).

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


class CallSession:
    """State of one `time_iterations` call: the call counter and the device-specific marks."""

    def __init__(self, run, prepare, device: torch.device, flush: Callable[[], None] | None,
                 hold: LaunchHold | None = None, settle_ms: float = 0.0) -> None:
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
        self.wall_ms: list[float] = []  # CPU: each timed call's wall time (its sample is the CPU time, if less)
        self.exposed = 0
        self.fault_free_streak = 0  # CPU: warm-up calls in a row, up to the last, that took no page fault
        self.faulted_calls = 0  # CPU: timed calls that took page faults

    def sync(self) -> None:
        if self.is_cuda:
            _cuda_synchronize(self.device)

    def settle(self) -> None:
        """Drain the device, then leave it idle for `settle_ns` (a host spin: sleep overshoots)."""
        _cuda_synchronize(self.device)
        until = _perf_counter_ns() + self.settle_ns
        while _perf_counter_ns() < until:
            pass

    def begin_call(self) -> int:
        """What comes before every call (settle, prepare, flush, hold); returns the call's index."""
        i = self.calls
        self.calls += 1
        if self.settle_ns:
            self.settle()
        if self.prepare is not None:
            self.prepare(i)
        if self.flush is not None:
            self.flush()
        if self.hold is not None:
            self.hold.spin()
        return i

    def untimed(self, count: int) -> None:
        """Warm-up calls: the same protocol, no timed marks (the host time still sizes the hold). On CUDA
        the chunk's last call is bracketed by events, read after the caller's sync (`warm_call_ms`)."""
        run, begin, clock = self.run, self.begin_call, _perf_counter_ns
        host_ns = [0] * count
        if self.is_cuda:
            self.ensure_events(1)
        for j in range(count):
            i = begin()
            last = self.is_cuda and j == count - 1
            faults = 0 if self.is_cuda else _minor_faults()
            t0 = clock()
            if last:
                _event_record(self.starts[0], self.stream)
            run(i)
            if last:
                _event_record(self.ends[0], self.stream)
            host_ns[j] = clock() - t0
            if not self.is_cuda:
                self.fault_free_streak = self.fault_free_streak + 1 if _minor_faults() == faults else 0
        if self.hold is not None:
            self.hold.grow([t / 1e6 for t in host_ns[1:] or host_ns])  # the first call may compile

    def warm_call_ms(self) -> float:
        """Device time of the last warm-up chunk's last call (after a sync); 0.0 on the CPU."""
        return _event_elapsed_time(self.starts[0], self.ends[0]) if self.is_cuda else 0.0

    def probed(self, probe) -> int:
        """Probe calls (`worker.probe.EscapedWorkProbe`): made exactly as timed calls are, each followed
        by the probe's own checks; they are not samples. Returns how many were made."""
        run, begin = self.run, self.begin_call
        self.ensure_events(1)
        start, end = self.starts[0], self.ends[0]
        made, t0 = 0, _perf_counter_ns()
        probe.begin()
        while probe.wants_more(made, (_perf_counter_ns() - t0) / 1e9):
            i = begin()
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
        return self._timed_cuda(count) if self.is_cuda else self._timed_cpu(count)

    def _timed_cuda(self, count: int) -> list[float]:
        self.ensure_events(count)
        run, begin, starts, ends, stream = self.run, self.begin_call, self.starts, self.ends, self.stream
        record, clock, hold = _event_record, _perf_counter_ns, self.hold
        host_ns = [0] * count
        held_ms = hold.ms if hold is not None else 0.0
        for j in range(count):
            i = begin()
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

    def _timed_cpu(self, count: int) -> list[float]:
        """Each sample is the call's CPU time (every thread of this process), or its wall time if less:
        time spent waiting for a core (preempted by another process) is not the call's, and a call that
        runs on several threads counts its latency, not the sum of its threads' work (docs/timing.md)."""
        run, begin, clock, cpu, faults = self.run, self.begin_call, _perf_counter_ns, _process_cpu_ns, _minor_faults
        marks = [(0, 0, 0, 0)] * count
        faulted = 0
        for j in range(count):
            i = begin()
            f0 = faults()
            c0 = cpu()
            t0 = clock()
            run(i)
            t1 = clock()
            c1 = cpu()
            faulted += faults() != f0
            marks[j] = (t0, t1, c0, c1)
        self.faulted_calls += faulted
        wall_ms = [(t1 - t0) / 1e6 for t0, t1, _, _ in marks]
        self.wall_ms.extend(wall_ms)
        return [min(wall, (c1 - c0) / 1e6) for wall, (_, _, c0, c1) in zip(wall_ms, marks)]
