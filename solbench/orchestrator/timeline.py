"""A run's timeline: when the driver reached each stage, so the seconds spent outside the work show.

A short run on several GPUs loses a fixed part of its wall time before the first workload starts (the
interpreter, device detection, problem discovery, the workers' start-up) and after the last one ends
(closing the workers, the report). `RunTimeline` notes a monotonic timestamp per stage, measured from the
process's own start; `solbench run --timeline` prints it at the end and benchmarks/cluster_throughput.py
reads that line. Stages a run never reaches (no trace, an error) are simply absent.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# The stages a run notes (a stage noted twice keeps its first time unless `last`); shown in time order,
# since which comes first can differ (workers may be started before the devices are confirmed).
STAGES = (
    "cli",  # the run command's entry (interpreter start-up and the CLI's imports are before it)
    "first_spawn",  # the first worker process (or cluster actor) asked to start
    "devices",  # the devices to run on are known
    "jobs",  # problems discovered, jobs built, trace file open
    "first_trace",  # the first workload's trace arrived
    "last_trace",  # the last trace arrived
    "closed",  # every worker (or actor) stopped and reaped; helper pools closed
    "report",  # the tables and the summary printed
    "exit",  # the run command returns (the interpreter's own exit follows)
)
LINE_PREFIX = "timeline (s since process start):"
_MARK = re.compile(r"(\w+)=([0-9.]+)")


def process_started() -> float:
    """This process's start on the `time.monotonic` clock (Linux: /proc/self/stat); elsewhere, now."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic()
    return time.monotonic() - max(0.0, age)


@dataclass
class RunTimeline:
    """Monotonic timestamps of a run's stages (`STAGES`), noted from any thread."""

    origin: float = field(default_factory=process_started)
    marks: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def mark(self, stage: str, *, last: bool = False) -> None:
        """Note that `stage` was reached now; only its first time counts unless `last` (then its latest)."""
        now = time.monotonic()
        with self._lock:
            if last or stage not in self.marks:
                self.marks[stage] = now

    def seconds(self) -> dict[str, float]:
        """Each stage reached, in time order, as seconds since the process started."""
        with self._lock:
            marks = sorted(self.marks.items(), key=lambda item: item[1])
        return {stage: round(at - self.origin, 3) for stage, at in marks}

    def line(self) -> str:
        """One line for a log: `LINE_PREFIX` then `stage=seconds` pairs (`parse_line` reads it back)."""
        return " ".join([LINE_PREFIX] + [f"{stage}={s:.2f}" for stage, s in self.seconds().items()])


def parse_line(text: str) -> dict[str, float] | None:
    """The stages of the last timeline line in `text` (a run's stderr); None when it has none."""
    found = None
    for line in text.splitlines():
        if line.startswith(LINE_PREFIX):
            found = {k: float(v) for k, v in _MARK.findall(line[len(LINE_PREFIX):])}
    return found
