"""What a worker process holds between requests, and the failure a request can end with.

Shared by the request handlers (`calls`, `timed_block`, `baselines`, `transfer`) and the main loop.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from pathlib import Path
from typing import Any

import torch

from solbench.orchestrator.cpu_cores import CORES_ENV
from solbench.orchestrator.cpu_cores import parse as parse_cores
from solbench.spec.workload import Workload


class Failure(Exception):
    """A per-request failure with the trace status it maps to. `capture_failed`: the call could not be
    captured as a CUDA graph (why), so the orchestrator restarts this worker and times it as launched."""

    def __init__(self, status: str, message: str, *, capture_failed: str | None = None):
        super().__init__(message)
        self.status = status
        self.capture_failed = capture_failed


CPU_THREADS_DEFAULT = 1


def cpu_threads() -> int:
    """torch's intra-op threads in a CPU worker: `SOLBENCH_CPU_THREADS` (set by the orchestrator), else 1."""
    try:
        return max(1, int(os.environ.get("SOLBENCH_CPU_THREADS", CPU_THREADS_DEFAULT)))
    except ValueError:
        return CPU_THREADS_DEFAULT


def pin_to_claimed_cores() -> None:
    """On the cores the orchestrator claimed for both of its CPU workers (`orchestrator.cpu_cores`), where it
    claimed any; the threads this process starts later inherit them."""
    cores = parse_cores(os.environ.get(CORES_ENV))
    if cores:
        try:
            os.sched_setaffinity(0, cores)
        except (AttributeError, OSError):  # not Linux, or a core outside this process's set: left as it is
            pass


class WorkerState:
    def __init__(self, device: str):
        self.torch = torch
        self.device = device
        self.is_cuda = device.startswith("cuda")
        if self.is_cuda:
            torch.cuda.set_device(0)
        else:  # one intra-op thread: a second one waits on a core another process holds (docs/timing.md)
            torch.set_num_threads(cpu_threads())
            pin_to_claimed_cores()
        self.function = None
        self.destination_passing = True
        self.definition = None
        self.reference_module = None
        self.baseline_threads: dict | None = None  # id -> the solution's threads alive before its first call
        self.baselines: dict[str, Any] = {}  # shipped baselines loaded in the reference worker, by content hash
        self.compiled: tuple | None = None  # (eager reference, torch.compile of it) in the reference worker
        self.source_dir: Path | None = None
        self.data_roots: list[Path] = []
        self.guard = None  # solbench.worker.guard.GuardState, set by main()
        # Generated inputs of the current workload by seed: trials, judging and timed blocks reuse
        # them instead of regenerating (custom entrypoints can take seconds).
        self.inputs_cache: dict[int, tuple] = {}
        self.inputs_cache_key: Workload | None = None  # the workload the cached sets are of
        # The last timed block's slots and CUDA graphs, kept for the next block of the same workload
        # (`timed_block.handle_time`), and the shortest call it timed (ms).
        self.timed_block = None
        self.timed_call_ms = 0.0
        # CUDA IPC (solbench.worker.transfer): the bound driver, why IPC is unavailable, what is exported
        # by this worker and what it received from the other one.
        self.cuda_driver = None
        self.ipc_unavailable: str | None = None
        self.exports: dict[int, Any] = {}
        self.received: dict[int, Any] = {}

    def synchronize(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize()


def format_exception(exc: BaseException, limit: int = 6000) -> str:
    text = "".join(traceback.format_exception(exc))
    return text[-limit:]


def harness_native(state: WorkerState):
    """The guard's quiet section for the harness's own ctypes calls (no guard: nothing to quieten)."""
    return state.guard.harness_native() if state.guard is not None else contextlib.nullcontext()
