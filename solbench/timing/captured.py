"""The timing primitives, captured when the harness is imported, and the check that they still hold.

A solution is loaded into the process that times it, after this module, and may replace the public
names (`torch.cuda.Event.record`, `time.perf_counter_ns`, ...). The timer uses only the private copies
taken here, so a replacement changes no measurement; `integrity_violations()` reports that it happened.
"""

from __future__ import annotations

import gc
import resource
import time
from collections.abc import Callable
from typing import Any

import torch

# the solution is loaded later and may patch the public names
_perf_counter_ns = time.perf_counter_ns
_clock_gettime_ns = time.clock_gettime_ns
_PROCESS_CPU = getattr(time, "CLOCK_PROCESS_CPUTIME_ID", None)
_sleep = time.sleep
_getrusage = resource.getrusage
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
    "time.clock_gettime_ns": (lambda: time.clock_gettime_ns, _clock_gettime_ns),
    "resource.getrusage": (lambda: resource.getrusage, _getrusage),
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


def _process_cpu_ns() -> int:
    """CPU time of this process, every thread of it, in ns: what CPU timings count (docs/timing.md,
    "CPU timings"); the wall clock where the platform has no process CPU clock."""
    return _clock_gettime_ns(_PROCESS_CPU) if _PROCESS_CPU is not None else _perf_counter_ns()


def _minor_faults() -> int:
    """Page faults this process has taken without I/O (first touches of memory it was given): on the CPU,
    a call that takes some is still growing the memory it runs in (docs/timing.md, "CPU timings")."""
    return _getrusage(resource.RUSAGE_SELF).ru_minflt


FLAG_FUNCTIONS_REPLACED = "timing_functions_replaced"  # integrity_violations() was non-empty after the block


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
