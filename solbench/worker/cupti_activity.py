"""CUPTI activity records for the escaped-work probe (`worker.probe`): every kernel, copy and memset and the
runtime/driver calls that launched them, on any stream and from any thread, between `start` and `stop`.

Each probe registers CUPTI's callbacks and finalizes CUPTI at its end. Keeping them registered across
probes was measured and not kept: on an H200 it saved only the registration (10-14 ms a probe) and the
finalize (2-3 ms), the flush of the records (230-310 ms for 24,000) being paid either way, and it left
the eager launches after it slower (docs/timing.md).
"""

from __future__ import annotations


def load_cupti():
    """The cupti-python bindings module, or None when the package (or its library) is missing."""
    try:
        from cupti import cupti  # optional dependency (cupti-python)
    except Exception:  # noqa: BLE001 - absent, or present without a usable libcupti
        return None
    return cupti


class ActivityCollector:
    """CUPTI activity collection between `start` and `stop` (all streams, all threads)."""

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

    def start(self) -> None:
        self.cupti.activity_register_callbacks(self._requested, self._completed)
        for name in self.KINDS:
            kind = getattr(self.cupti.ActivityKind, name)
            self.cupti.activity_enable(kind)
            self.enabled.append(kind)

    def stop(self) -> None:
        try:
            self.cupti.activity_flush_all(1)
        finally:
            for kind in reversed(self.enabled):
                self.cupti.activity_disable(kind)
            self.cupti.finalize()  # so the next timed block can register its callbacks again

    def now(self) -> int:
        return int(self.cupti.get_timestamp())

    def records(self, t0: int, t1: int) -> list[tuple[int, int, int, int]]:
        """The work launched by API calls made in [t0, t1]."""
        ids = {corr for start, corr in self.launches if t0 <= start <= t1}
        return [r for r in self.work if r[2] in ids]

    def per_call(self, windows: list[tuple[int, ...]]) -> dict[str, list]:
        """Per call (the launch windows of the opening marker, of the call, of the closing marker): span,
        busy and kernel ms, streams, and ms of the call's work outside [opening marker's end, closing
        marker's start] (0 when a marker was not recorded)."""
        out: dict[str, list] = {"span_ms": [], "busy_ms": [], "kernel_ms": [], "streams": [], "escaped_ms": [],
                                "unmarked": []}
        for p0, p1, t0, t1, m0, m1 in windows:
            recs = self.records(t0, t1)
            opening = [r[1] for r in self.records(p0, p1) if r[3]]
            closing = [r[0] for r in self.records(m0, m1) if r[3]]
            out["unmarked"].append(int(not opening or not closing))
            if not recs:
                for key in ("span_ms", "busy_ms", "kernel_ms", "streams", "escaped_ms"):
                    out[key].append(0)
                continue
            out["span_ms"].append((max(r[1] for r in recs) - min(r[0] for r in recs)) / 1e6)
            out["busy_ms"].append(union_ns([(r[0], r[1]) for r in recs]) / 1e6)
            out["kernel_ms"].append(sum(r[1] - r[0] for r in recs if r[3]) / 1e6)
            out["streams"].append(len({self.streams.get(r[2]) for r in recs if r[2] in self.streams}))
            out["escaped_ms"].append(outside_ns(recs, max(opening), min(closing)) / 1e6 if opening and closing else 0.0)
        return out


def outside_ns(records: list[tuple[int, int, int, int]], window_start: int, window_end: int) -> int:
    """How long the records ran outside [window_start, window_end], summed (overlaps are not merged)."""
    return sum(max(0, min(end, window_start) - start) + max(0, end - max(start, window_end))
               for start, end, _, _ in records)


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
