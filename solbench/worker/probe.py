"""Work that escapes the timer's CUDA events: a cross-check on the last calls of a solution's timed block.

The timer brackets each call with CUDA events on the current stream. Work a solution puts on another
stream without making the current stream wait for it (or leaves queued for later) is invisible to those
events. So the last few calls of the solution's last timed block are *probe calls*: made by the timer
exactly as its timed calls are (the same settle, input rotation, cache flush and launch hold, the next
argument slot; a replayed CUDA graph when the block replays graphs), so a call cannot tell a probe call
from a timed one before it returns. After each, the probe measures:

* the tail: how long a device-wide synchronize still waits once the call's end event has completed,
  beyond a second synchronize made right after it, when nothing can be queued (the host's own cost of
  a synchronize at that moment: tens of microseconds on a busy host, which a fixed floor would read as
  escaped work). A call that joined all its work leaves nothing behind; one that left work on a side
  stream makes the first synchronize wait for it. When the median tail says "escaped", the probe waits
  `CONFIRM_PAUSE_S` and makes a second round of as many calls; it accuses only when each round's median
  does: escaped work shows in every call, a moment of host or driver noise does not repeat a second
  later.
* with cupti-python installed: every kernel, memcpy and memset the call launched, on any stream and from
  any thread (CUPTI activity records, attributed to the call by the correlation ids of the runtime/driver
  API calls made between its start and end marks), and two *marker* kernels the probe queues on the
  current stream, one right before the start event and one right after the end event. The call's work
  that ran before the first marker ended (on a stream that never waited for the current one, beside the
  launch hold) or after the second one started escaped the events, whatever its size: the decision reads
  the GPU's own timestamps of the work, not a time threshold, so it does not depend on luck (how long the
  side work is, when the probe happens to look).

Decision (docs/anticheat.md): the reported latency stays the event time of the timed block; the probe
decides whether that time can be trusted. With CUPTI: REWARD_HACK when it shows escaped work (more
than `ESCAPE_TOLERANCE_MS`, and more than `ESCAPE_FRACTION` of the call's GPU-busy time, so that an
honest kernel's stray microsecond, e.g. an asynchronous copy of a constant, is not an accusation) or a
span over `SPAN_FACTOR x event time + SPAN_SLACK_MS`. Without CUPTI the median tail decides, over
`max(TAIL_FLOOR_MS, TAIL_FRACTION x event time)` in every round (the trace says so: below that floor short side work
goes unseen, which is why cupti-python belongs on every GPU machine: `pip install solbench[cuda]`). In a
CUDA graph replay nothing can escape (the graph holds what was captured; work left out of it shows as
stale outputs, which the sampled checks fail because the harness poisons a graph's outputs before every
replay).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from solbench.worker.cupti_activity import ActivityCollector, load_cupti

PROBE_CALLS = 5
# CUPTI slows launch-heavy calls many times over (a 0.45 s eager loop of small kernels took ~19 s
# traced on an H100): past this budget the probe stops, after at least MIN_PROBE_CALLS recorded calls.
PROBE_BUDGET_S = 2.0
MIN_PROBE_CALLS = 2
WARM_PROBE_BELOW_MS = 10.0  # calls this short get an unrecorded first probe call (CUPTI's start-up)
# Honest calls were seen 0.051-0.077 ms beyond the empty synchronize on an H100 without CUPTI (a reference,
# L1/093, in 2 of 3 runs, both rounds; a thread-pool solution once in 14 workloads) while CUPTI found no
# work outside their events; the hostile side-stream cases leave 0.3 ms and more.
TAIL_FLOOR_MS = 0.1
TAIL_FRACTION = 0.25
CONFIRM_PAUSE_S = 1.0  # before the second round: longer than a CUDA context's creation beside the call
SPAN_FACTOR = 1.5
SPAN_SLACK_MS = 0.02
ESCAPE_TOLERANCE_MS = 0.0005
ESCAPE_FRACTION = 0.05

_perf_counter_ns = time.perf_counter_ns
_sleep = time.sleep
_cuda_synchronize = torch.cuda.synchronize
_cuda_sleep = torch.cuda._sleep
_event_synchronize = torch.cuda.Event.synchronize
_event_elapsed_time = torch.cuda.Event.elapsed_time


@dataclass
class ProbeResult:
    event_ms: list[float] = field(default_factory=list)
    tail_ms: list[float] = field(default_factory=list)  # the synchronize after the end event, host ms
    idle_ms: list[float] = field(default_factory=list)  # the synchronize right after that one (nothing queued)
    span_ms: list[float] = field(default_factory=list)  # CUPTI: first start to last end, all streams
    busy_ms: list[float] = field(default_factory=list)  # CUPTI: time any of the call's work ran (union)
    kernel_ms: list[float] = field(default_factory=list)  # CUPTI: sum of kernel durations
    streams: list[int] = field(default_factory=list)  # CUPTI: distinct streams per call
    escaped_ms: list[float] = field(default_factory=list)  # CUPTI: the call's work outside its start..end
    cupti: str = "unavailable"  # "used", "unavailable", "failed: <why>" or "incomplete: <why>" (markers missing)
    rounds: list[int] = field(default_factory=list)  # recorded calls per round of the tail rule (none: one round)

    def verdict(self) -> str | None:
        """Why the timed events cannot be trusted, or None. With CUPTI the GPU's own timestamps accuse first;
        the synchronize tail is read in every case (its host time also holds driver work such as a freed
        graph's clean-up, hence its floor): code in the solution's process can switch CUPTI's collection
        off around work it hides, and the tail does not depend on anything that process can reach."""
        if not self.event_ms:
            return None
        event = statistics.median(self.event_ms)
        if self.cupti == "used" or self.cupti.startswith("incomplete"):  # incomplete: the calls it did record
            for escaped, busy in zip(self.escaped_ms, self.busy_ms):
                if escaped > ESCAPE_TOLERANCE_MS and escaped > ESCAPE_FRACTION * busy:
                    return (f"{escaped:.4f} ms of the call's {busy:.4f} ms of GPU work ran outside its start and "
                            f"end events (CUPTI; event time {event:.4f} ms): work on a stream the current stream "
                            f"never waited for, or did not wait on")
            if self.span_ms and statistics.median(self.span_ms) > SPAN_FACTOR * event + SPAN_SLACK_MS:
                return (f"CUPTI saw {statistics.median(self.span_ms):.3f} ms of GPU activity per call across "
                        f"{max(self.streams or [1])} stream(s), the events only {event:.3f} ms: work escaped the "
                        f"timed stream")
        return self.tail_verdict(event)

    def tail_verdict(self, event: float | None = None) -> str | None:
        """The tail rule alone: every round's median tail beyond the empty synchronize over the floor."""
        if not self.event_ms:
            return None
        event = statistics.median(self.event_ms) if event is None else event
        medians = self.round_tail_excess_ms()
        if medians and min(medians) > max(TAIL_FLOOR_MS, TAIL_FRACTION * event):
            rounds = (f"median of {len(self.tail_ms)} calls" if len(medians) == 1 else
                      f"medians of {len(medians)} rounds a second apart: " + ", ".join(f"{m:.3f}" for m in medians) + " ms")
            unseen = "; CUPTI saw none of it beyond the events" if self.cupti == "used" else ""
            return (f"GPU work kept running {min(medians):.3f} ms after the call's end event (event time {event:.3f} ms, "
                    f"{rounds}{unseen}): work on a stream the current stream never waited for")
        return None

    def _idle(self) -> list[float]:
        """The empty synchronize after each tail (records from before it existed: zeros)."""
        return self.idle_ms if len(self.idle_ms) == len(self.tail_ms) else [0.0] * len(self.tail_ms)

    def _excess(self) -> list[float]:
        return [max(0.0, tail - empty) for tail, empty in zip(self.tail_ms, self._idle())]

    def tail_excess_ms(self) -> float | None:
        """Median over the calls of the tail beyond the empty synchronize that followed it; None if none."""
        return statistics.median(self._excess()) if self.tail_ms else None

    def round_tail_excess_ms(self) -> list[float]:
        """The same median per round (`rounds`; records without them are one round)."""
        excess = self._excess()
        counts = self.rounds if sum(self.rounds) == len(excess) else [len(excess)]
        medians, start = [], 0
        for count in counts:
            if count:
                medians.append(statistics.median(excess[start:start + count]))
            start += count
        return medians

    def evidence(self) -> str:
        """The per-call figures an accusation rests on, for the trace's log."""
        calls = "; ".join(f"{t:.3f}/{i:.3f}/{e:.3f}" for t, i, e in zip(self.tail_ms, self._idle(), self.event_ms))
        text = f"probe calls (synchronize after the end event / empty synchronize / event time, ms): {calls}"
        if self.escaped_ms:
            text += "; CUPTI escaped/busy ms: " + "; ".join(f"{a:.4f}/{b:.4f}" for a, b in zip(self.escaped_ms, self.busy_ms))
        return text

    def tail_suspicious(self) -> bool:
        """Whether the tails so far would be an accusation (then the probe calls again), CUPTI or not."""
        return self.tail_verdict() is not None

    def to_dict(self) -> dict[str, Any]:
        return {"event_ms": self.event_ms, "tail_ms": self.tail_ms, "idle_ms": self.idle_ms, "span_ms": self.span_ms,
                "busy_ms": self.busy_ms, "kernel_ms": self.kernel_ms, "streams": self.streams,
                "escaped_ms": self.escaped_ms, "cupti": self.cupti, "rounds": self.rounds}


class EscapedWorkProbe:
    """The hooks the timer calls around each probe call (`timing.timer.time_iterations(probe=...)`).

    `quiet()` wraps the harness's own CUPTI calls (the worker's guard: CUPTI loads its library through
    ctypes). `warm_call`: the first probe call is made but not recorded (CUPTI's first activity costs
    milliseconds, which only matters to short calls)."""

    def __init__(self, calls: int = PROBE_CALLS, budget_s: float = PROBE_BUDGET_S,
                 quiet: Callable[[], Any] = contextlib.nullcontext, use_cupti: bool = True, warm_call: bool = True):
        self.calls, self.budget_s, self.quiet, self.warm_call = calls, budget_s, quiet, warm_call
        self.result = ProbeResult()
        self.collector: ActivityCollector | None = None
        self.windows: list[tuple[int, ...]] = []
        self._marks: list[int] = []
        self._recorded = not warm_call
        # A second round of calls for tails that would accuse: whether it began, and at which call and second.
        self._confirming, self._round_made, self._round_s = False, 0, 0.0
        self._cupti = load_cupti() if use_cupti else None
        self.active = False  # between the first probe call and `finish`: CUPTI collects (its thread works)

    def begin(self) -> None:
        """Before the first probe call (not before: CUPTI must not slow the timed calls)."""
        self.active = True
        if self._cupti is None:
            return
        try:
            with self.quiet():
                self.collector = ActivityCollector(self._cupti)
                self.collector.start()
            self.result.cupti = "used"
        except Exception as exc:  # noqa: BLE001 - e.g. another CUPTI client already holds the device
            self.collector = None
            self.result.cupti = f"failed: {type(exc).__name__}: {exc}"[:200]

    def wants_more(self, made: int, elapsed_s: float) -> bool:
        """Whether the timer should make another probe call (`made` so far, `elapsed_s` since the first).
        Tails that would accuse get a second round of as many calls (its own budget), after a pause, before
        the verdict."""
        if self._round_wants_more(made - self._round_made, elapsed_s - self._round_s):
            return True
        if self._confirming or not self.result.tail_suspicious():
            return False
        self.result.rounds = [len(self.result.tail_ms)]
        _sleep(CONFIRM_PAUSE_S)
        self._confirming, self._round_made, self._round_s = True, made, elapsed_s + CONFIRM_PAUSE_S
        return True

    def _round_wants_more(self, made: int, elapsed_s: float) -> bool:
        warm = 1 if self.warm_call and not self._confirming else 0
        if made >= self.calls + warm:
            return False
        return made < MIN_PROBE_CALLS + warm or elapsed_s <= self.budget_s

    def _now(self) -> int:
        if self.collector is None:
            return 0
        with self.quiet():
            return self.collector.now()

    def opening(self) -> None:
        """After the launch hold, before the start event: the opening marker kernel on the current stream."""
        self._marks = [self._now()]
        if self.collector is not None:
            _cuda_sleep(1)
        self._marks.append(self._now())

    def started(self) -> None:
        """Right before the call's start event is recorded."""
        self._marks.append(self._now())

    def ended(self, start, end, stream) -> None:
        """Right after the end event is recorded: the closing marker kernel, queued behind it."""
        self._marks.append(self._now())
        self._marks.append(self._now())
        if self.collector is not None:
            _cuda_sleep(1)
        self._marks.append(self._now())

    def settled(self, start, end) -> None:
        """The call's events completed: how long does the device still need?"""
        _event_synchronize(end)
        before = _perf_counter_ns()
        _cuda_synchronize()
        between = _perf_counter_ns()
        _cuda_synchronize()  # nothing can be queued now: what a synchronize costs this host at this moment
        tail_ms, idle_ms = (between - before) / 1e6, (_perf_counter_ns() - between) / 1e6
        if not self._recorded:
            self._recorded = True  # the unrecorded warm call
            return
        self.record(tail_ms, idle_ms, _event_elapsed_time(start, end))
        self.windows.append(tuple(self._marks))

    def record(self, tail_ms: float, idle_ms: float, event_ms: float) -> None:
        """One recorded probe call's figures, counted in its round."""
        result = self.result
        result.tail_ms.append(tail_ms)
        result.idle_ms.append(idle_ms)
        result.event_ms.append(event_ms)
        if self._confirming:
            result.rounds[1:] = [len(result.tail_ms) - result.rounds[0]]

    def finish(self) -> ProbeResult:
        """Stop collecting and compute the per-call CUPTI figures (when CUPTI was used)."""
        self.active = False
        if self.collector is not None:
            try:
                with self.quiet():
                    self.collector.stop()
                figures = self.collector.per_call(self.windows)
                unmarked = sum(figures.pop("unmarked"))
                for key, values in figures.items():
                    setattr(self.result, key, values)
                if unmarked:  # its figures of those calls say nothing (none escaped): the tail reads them
                    self.result.cupti = (f"incomplete: the probe's marker kernels were missing from CUPTI's records "
                                         f"in {unmarked} of {len(self.windows)} calls (its collection was switched "
                                         f"off or taken over while they ran)")
            except Exception as exc:  # noqa: BLE001
                self.result.cupti = f"failed: {type(exc).__name__}: {exc}"[:200]
            self.collector = None
        return self.result
