"""Work that escapes the timer's CUDA events: a cross-check run after each timed block.

The timer brackets each call with CUDA events on the current stream. Work a solution puts on another
stream without making the current stream wait for it (or leaves queued for later) is invisible to
those events. After the timed block the worker makes a few *probe* calls, each isolated by device
synchronisations, and measures two things:

* the tail: how long a device-wide synchronize still waits once the call's end event has completed.
  A call that joined all its work leaves nothing behind (the tail is the cost of an empty
  synchronize, microseconds); one that left work on a side stream makes the synchronize wait for it.
  This needs nothing but torch.
* with cupti-python installed: every kernel, memcpy and memset the call launched, on any stream and
  from any thread (CUPTI activity records, attributed to the call by the correlation ids of the
  runtime/driver API calls made between its start and end), giving the GPU-busy span of the call
  across all streams and the sum of its kernel times.

Decision (documented in docs/anticheat.md): the reported latency stays the event time of the timed
block; the probe only decides whether that time can be trusted. A median tail above
`max(TAIL_FLOOR_MS, TAIL_FRACTION x event time)`, or a CUPTI span above
`SPAN_FACTOR x event time + SPAN_SLACK_MS`, means work escaped the events: REWARD_HACK.

Everything is optional: without CUDA nothing runs; without cupti-python the result says
`"cupti": "unavailable"` and the tail check alone decides.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from solbench.timing.config import TimingConfig
from solbench.timing.timer import flusher_for
from solbench.worker.calls import invoke, refill_outputs
from solbench.worker.inputs_cache import make_call_inputs
from solbench.worker.state import Failure, WorkerState, format_exception, harness_native

PROBE_CALLS = 5
# CUPTI slows launch-heavy calls many times over (a 0.45 s eager loop of small kernels took ~19 s
# traced on an H100): past this budget the probe stops, after at least one recorded call.
PROBE_BUDGET_S = 2.0
TAIL_FLOOR_MS = 0.05
TAIL_FRACTION = 0.25
SPAN_FACTOR = 1.5
SPAN_SLACK_MS = 0.02

_perf_counter_ns = time.perf_counter_ns


def load_cupti():
    """The cupti-python bindings module, or None when the package (or its library) is missing."""
    try:
        from cupti import cupti  # optional dependency (cupti-python)
    except Exception:  # noqa: BLE001 - absent, or present without a usable libcupti
        return None
    return cupti


@dataclass
class ProbeResult:
    event_ms: list[float] = field(default_factory=list)
    tail_ms: list[float] = field(default_factory=list)
    span_ms: list[float] = field(default_factory=list)  # CUPTI: first start to last end, all streams
    busy_ms: list[float] = field(default_factory=list)  # CUPTI: time any of the call's work ran (union)
    kernel_ms: list[float] = field(default_factory=list)  # CUPTI: sum of kernel durations
    streams: list[int] = field(default_factory=list)  # CUPTI: distinct streams per call
    cupti: str = "unavailable"  # "used", "unavailable", or "failed: <why>"

    def verdict(self) -> str | None:
        """Why the timed events cannot be trusted, or None."""
        if not self.event_ms:
            return None
        event = statistics.median(self.event_ms)
        if self.tail_ms:
            tail = statistics.median(self.tail_ms)
            if tail > max(TAIL_FLOOR_MS, TAIL_FRACTION * event):
                return (f"GPU work kept running {tail:.3f} ms after the call's end event (event time {event:.3f} ms): "
                        f"work on a stream the current stream never waited for")
        if self.span_ms:
            span = statistics.median(self.span_ms)
            if span > SPAN_FACTOR * event + SPAN_SLACK_MS:
                return (f"CUPTI saw {span:.3f} ms of GPU activity per call across {max(self.streams or [1])} "
                        f"stream(s), the events only {event:.3f} ms: work escaped the timed stream")
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"event_ms": self.event_ms, "tail_ms": self.tail_ms, "span_ms": self.span_ms,
                "busy_ms": self.busy_ms, "kernel_ms": self.kernel_ms, "streams": self.streams, "cupti": self.cupti}


class _Collector:
    """CUPTI activity collection for the duration of a `with` block (all streams, all threads)."""

    KINDS = ("RUNTIME", "DRIVER", "CONCURRENT_KERNEL", "MEMCPY", "MEMSET")

    def __init__(self, cupti) -> None:
        self.cupti = cupti
        self.launches: list[tuple[int, int]] = []  # (API call start ns, correlation id)
        self.work: list[tuple[int, int, int, int]] = []  # (start ns, end ns, correlation id, is kernel)
        self.streams: dict[int, int] = {}  # correlation id -> stream id
        self.enabled: list = []

    def _requested(self):
        return 8 * 1024 * 1024, 0

    def _completed(self, activities) -> None:
        kinds = self.cupti.ActivityKind
        api = {int(kinds.RUNTIME), int(kinds.DRIVER)}
        kernel = int(kinds.CONCURRENT_KERNEL)
        gpu = {kernel, int(kinds.MEMCPY), int(kinds.MEMSET)}
        for a in activities:
            kind = int(a.kind)
            if kind in api:
                self.launches.append((int(a.start), int(a.correlation_id)))
            elif kind in gpu:
                self.work.append((int(a.start), int(a.end), int(a.correlation_id), int(kind == kernel)))
                stream = getattr(a, "stream_id", None)
                if stream is not None:
                    self.streams[int(a.correlation_id)] = int(stream)

    def __enter__(self):
        cupti = self.cupti
        cupti.activity_register_callbacks(self._requested, self._completed)
        for name in self.KINDS:
            kind = getattr(cupti.ActivityKind, name)
            cupti.activity_enable(kind)
            self.enabled.append(kind)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.cupti.activity_flush_all(1)
        finally:
            for kind in reversed(self.enabled):
                self.cupti.activity_disable(kind)
            self.cupti.finalize()  # so the next timed block can register its callbacks again

    def now(self) -> int:
        return int(self.cupti.get_timestamp())

    def per_call(self, windows: list[tuple[int, int]]) -> tuple[list[float], list[float], list[float], list[int]]:
        """(GPU span ms, GPU busy ms, kernel-time sum ms, distinct streams) of the work launched in
        each window."""
        by_corr: dict[int, list] = {}
        for rec in self.work:
            by_corr.setdefault(rec[2], []).append(rec)
        spans, busy, sums, streams = [], [], [], []
        for t0, t1 in windows:
            ids = {corr for start, corr in self.launches if t0 <= start <= t1}
            recs = [r for corr in ids for r in by_corr.get(corr, [])]
            if not recs:
                spans.append(0.0)
                busy.append(0.0)
                sums.append(0.0)
                streams.append(0)
                continue
            spans.append((max(r[1] for r in recs) - min(r[0] for r in recs)) / 1e6)
            busy.append(union_ns([(r[0], r[1]) for r in recs]) / 1e6)
            sums.append(sum(r[1] - r[0] for r in recs if r[3]) / 1e6)
            streams.append(len({self.streams.get(corr) for corr in ids if corr in self.streams}))
        return spans, busy, sums, streams


def union_ns(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals: the time the GPU had any of them running."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def probe(prepare: Callable[[int], None], run: Callable[[int], Any], first_index: int,
          calls: int = PROBE_CALLS, use_cupti: bool = True, flush: Callable[[], None] | None = None,
          quiet: Callable[[], Any] = contextlib.nullcontext, budget_s: float | None = None,
          warm_call: bool = True) -> ProbeResult:
    """Make `calls` isolated calls (`prepare(i)`, `flush()`, then `run(i)`) and measure what escaped
    their events. Pass the timer's cache flush so the GPU-busy times are taken under the same
    conditions as the timed calls (a call on L2-resident inputs can be twice as fast). `quiet()` wraps
    the harness's own CUPTI calls (the worker's guard: CUPTI loads its library through ctypes).
    Past `budget_s` no further call starts; `warm_call=False` skips the unrecorded first call (its
    milliseconds of CUPTI start-up only matter to short calls)."""
    result = ProbeResult()
    cupti = load_cupti() if use_cupti else None
    collector = None
    if cupti is not None:
        try:
            with quiet():
                collector = _Collector(cupti).__enter__()
            result.cupti = "used"
        except Exception as exc:  # noqa: BLE001 - e.g. another CUPTI client already holds the device
            collector = None
            result.cupti = f"failed: {type(exc).__name__}: {exc}"[:200]
    windows: list[tuple[int, int]] = []
    try:
        stream = torch.cuda.current_stream()
        if warm_call:
            prepare(first_index - 1)  # an unrecorded call first: CUPTI's first activity costs milliseconds
            run(first_index - 1)
            torch.cuda.synchronize()
        started = time.monotonic()
        for k in range(calls):
            if k and budget_s is not None and time.monotonic() - started > budget_s:
                break
            i = first_index + k
            prepare(i)
            if flush is not None:
                flush()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with quiet():
                t0 = collector.now() if collector else 0
            start.record(stream)
            run(i)
            end.record(stream)
            with quiet():
                t1 = collector.now() if collector else 0
            end.synchronize()
            before = _perf_counter_ns()
            torch.cuda.synchronize()
            result.tail_ms.append((_perf_counter_ns() - before) / 1e6)
            result.event_ms.append(start.elapsed_time(end))
            windows.append((t0, t1))
    finally:
        if collector is not None:
            try:
                with quiet():
                    collector.__exit__(None, None, None)
                result.span_ms, result.busy_ms, result.kernel_ms, result.streams = collector.per_call(windows)
            except Exception as exc:  # noqa: BLE001
                result.cupti = f"failed: {type(exc).__name__}: {exc}"[:200]
    return result


WARM_PROBE_BELOW_MS = 10.0  # calls this short get an unrecorded CUPTI warm-up call before the probe


def escaped_work_probe(state: WorkerState, workload: dict, config: TimingConfig, slots: list, sets: list,
                       fresh: bool, call_ms: float = 0.0, recent: list | None = None) -> ProbeResult:
    """A few isolated calls after the timed block: did GPU work escape the timer's events?

    A device synchronize that still waits after the call's end event, or CUPTI activity beyond the
    event time, is work on a stream nobody waited for (see the module docstring).
    """
    slot_inputs, slot_outputs = slots[0]
    flush = flusher_for(torch.device(state.device), config.l2_flush_mode).flush if config.l2_flush else None
    chooser = random.SystemRandom()

    def prepare(i: int) -> None:
        if fresh and recent:
            source = recent[chooser.randrange(len(recent))]
        elif fresh:
            seed = chooser.getrandbits(62)
            source = make_call_inputs(state, workload, seed, fresh_copy=False)[2]
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
