"""Run-wide settings shared by the CLI, the Python API and the pytest plugin."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

# A timed block whose call could not be captured as a CUDA graph fails with this in its log: the
# orchestrator restarts that worker (a failed capture can break the process) and times it as launched.
GRAPH_CAPTURE_FAILED = "CUDA graph capture failed"


@dataclass
class RunConfig:
    device: str = "auto"  # "auto", "cpu", "cuda" or "cuda:N"
    trials: int = 3  # correctness trials per workload, each with fresh inputs
    warmup: int | None = None  # None: the timer's default for the device
    iters: int | None = None  # minimum timed iterations per block; None: the timer's default
    adaptive: bool = True  # keep timing until the median's confidence interval is tight
    target_rel_ci: float | None = None  # None: the timer's default
    max_time_s: float | None = None  # adaptive budget per timed block; None: the timer's default
    fresh_inputs_budget_s: float | None = None  # per timed block; 0: rotate the fixed timed sets (flagged)
    launch_hold: bool = True  # CUDA: time calls with their launch queued ahead (see solbench.timing.timer)
    cuda_graphs: bool = True  # CUDA: time replays of the call captured as a CUDA graph (docs/timing.md)
    timing_rounds: int = 2  # interleaved reference/solution blocks, so drift hits both alike
    timed_input_sets: int = 2  # distinct input sets rotated through the timed iterations
    checked_timed_outputs: int = 3  # timed iterations whose outputs are verified too
    time_reference: bool = True
    timeout_s: float = 300.0  # per request to a worker (one trial, one timed block)
    compile_timeout_s: float = 600.0
    max_workloads: int | None = None
    data_roots: list[Path] = field(default_factory=list)
    seed: int | None = None  # None: a secret seed per run
    hw: str | None = None  # hardware spec for speed-of-light figures; None: detect
    lock_clocks: bool = False  # lock each GPU's clocks (NVML, per-GPU presets) for the run; restored after
    baseline_shipped: bool = True  # time the optimised baseline shipped with a problem, where there is one
    baseline_compile: bool = False  # also time torch.compile of the reference as a baseline
    baseline_ms: dict[str, float] = field(default_factory=dict)  # workload uuid -> published baseline time
    # On a GPU, solution outputs of at least this many bytes reach the reference worker by CUDA IPC
    # instead of as bytes through the orchestrator (solbench.runner.transfer); None: always bytes.
    ipc_min_bytes: int | None = 64 << 20

    def resolved_device(self) -> str:
        if self.device != "auto":
            return "cuda:0" if self.device == "cuda" else self.device
        return "cuda:0" if cuda_available() else "cpu"

    def all_data_roots(self, problem_dir: Path | None) -> list[Path]:
        roots = [problem_dir] if problem_dir else []
        roots += list(self.data_roots)
        for var in ("SOLBENCH_DATA_ROOT", "FLASHINFER_TRACE_DIR"):
            for part in filter(None, os.environ.get(var, "").split(os.pathsep)):
                roots.append(Path(part))
        return roots


def cuda_available() -> bool:
    """Whether CUDA is usable, without initialising it in this (orchestrator) process."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def visible_cuda_devices() -> list[str]:
    import torch

    if not cuda_available():
        return []
    return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
