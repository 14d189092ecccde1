"""The run configuration, and the one place user options become it.

`solbench run`, the Python API (`solbench.api`) and the pytest plugin all call `configure` with option
values named after `RunConfig`'s fields and `choose_devices` with the devices asked for, so the same
options give the same run from every door. Timing settings left unset are the timer's defaults for the
device (`solbench.timing.config.TimingConfig`); `RunConfig.timing_config` applies the overrides.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from solbench.orchestrator.devices import cuda_device_count
from solbench.sol.hardware import UnknownHardwareError, load_spec
from solbench.spec.errors import SpecError
from solbench.timing.config import TimingConfig

# `--quick` / `--solbench-quick` / `quick=True`: a smoke test of the pipeline; its timings mean nothing.
QUICK_SETTINGS: dict[str, Any] = {"trials": 1, "warmup": 1, "iters": 3, "adaptive": False, "timing_rounds": 1}
# The GPU whose bounds are shown where a run names none and runs on none: the official set targets it.
DEFAULT_SOL_HW = "B200"


class DeviceUnavailableError(SpecError):
    """A device was asked for by name and this machine cannot provide it (no silent fallback)."""


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
    strict: bool = False  # numerics flags (outliers, concentrated mismatches, bias) fail a workload (docs/anticheat.md)
    timeout_s: float = 300.0  # per request to a worker (one trial, one timed block)
    compile_timeout_s: float = 600.0
    max_workloads: int | None = None  # only the first N workloads of each problem (applied to the jobs)
    data_roots: list[Path] = field(default_factory=list)
    seed: int | None = None  # None: a secret seed per run
    hw: str | None = None  # hardware spec for speed-of-light figures; None: detect
    lock_clocks: bool = False  # lock each GPU's clocks (NVML, per-GPU presets) for the run; restored after
    baseline_shipped: bool = True  # time the optimised baseline shipped with a problem, where there is one
    baseline_compile: bool = False  # also time torch.compile of the reference as a baseline
    baseline_ms: dict[str, float] = field(default_factory=dict)  # workload uuid -> published baseline time
    # On a GPU, solution outputs of at least this many bytes reach the reference worker by CUDA IPC
    # instead of as bytes through the orchestrator (solbench.worker.transfer); None: always bytes. On an
    # H100 (benchmarks/judge_transfer.py, 3 trials and 4 checked outputs) the two paths cost the same at
    # 2 and 8 MiB, and IPC saved 0.2 s per workload at 24 MiB and 0.46 s at 48 MiB.
    ipc_min_bytes: int | None = 16 << 20
    # Ray (docs/cluster.md): "auto" (a running cluster, else a local one), "ray" (a running one),
    # "ray://HOST:PORT" (Ray client) or "HOST:PORT" (the head's GCS); None: this host's devices only.
    cluster: str | None = None
    cluster_actors: int | None = None  # at most this many session actors; None: one per GPU (CPU: one per node)

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise SpecError("trials (--trials) must be at least 1")
        if self.timing_rounds < 1:
            raise SpecError("timing rounds (--timing-rounds) must be at least 1")
        if self.max_workloads is not None and self.max_workloads < 1:
            raise SpecError("max workloads (--max-workloads) must be at least 1")
        if self.timed_input_sets < 1 or self.checked_timed_outputs < 0:
            raise SpecError("timed_input_sets must be at least 1 and checked_timed_outputs at least 0")
        if self.cluster_actors is not None and self.cluster_actors < 1:
            raise SpecError("cluster actors (--cluster-actors) must be at least 1")

    def resolved_device(self) -> str:
        if self.device != "auto":
            return "cuda:0" if self.device == "cuda" else self.device
        return "cuda:0" if cuda_available() else "cpu"

    def timing_config(self, device: str) -> TimingConfig:
        """The timer settings for one device: its defaults with this run's overrides."""
        try:
            return TimingConfig.for_device(device).with_overrides(
                warmup=self.warmup, iters=self.iters, adaptive=self.adaptive, target_rel_ci=self.target_rel_ci,
                max_time_s=self.max_time_s, launch_hold=self.launch_hold, cuda_graphs=self.cuda_graphs)
        except ValueError as exc:
            raise SpecError(f"timing settings: {exc}") from None

    def all_data_roots(self, problem_dir: Path | None) -> list[Path]:
        roots = [problem_dir] if problem_dir else []
        roots += list(self.data_roots)
        for var in ("SOLBENCH_DATA_ROOT", "FLASHINFER_TRACE_DIR"):
            for part in filter(None, os.environ.get(var, "").split(os.pathsep)):
                roots.append(Path(part))
        return roots


def configure(base: RunConfig | None = None, *, quick: bool = False, baseline_csv: Path | str | None = None,
              **options: Any) -> RunConfig:
    """The run configuration from user options (`RunConfig` field names; None leaves a field as it is).

    `quick`: smoke-test settings (`QUICK_SETTINGS`) under the explicit options; `baseline_csv`: published
    baseline times read into `baseline_ms`. Raises SpecError on unknown options and invalid values.
    """
    names = {f.name for f in fields(RunConfig)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise SpecError(f"unknown run option(s) {unknown}; known: {', '.join(sorted(names))}")
    settings = {**(QUICK_SETTINGS if quick else {}), **{k: v for k, v in options.items() if v is not None}}
    if baseline_csv is not None:
        settings["baseline_ms"] = read_baseline_csv(Path(baseline_csv))
    if "data_roots" in settings:
        settings["data_roots"] = [Path(p) for p in settings["data_roots"]]
    config = replace(base or RunConfig(), **settings)
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", config.device):
        raise SpecError(f"unknown device {config.device!r}: use auto, cpu, cuda or cuda:N")
    if config.hw is not None:
        try:
            load_spec(config.hw)  # an unknown name is bad input here, not a warning inside every trace
        except UnknownHardwareError as exc:
            raise SpecError(f"hardware spec (--hw): {exc}") from None
    config.timing_config(config.resolved_device())  # invalid timing overrides fail here, not in a worker
    if config.cluster is not None:
        check_cluster_option(config)
    return config


def check_cluster_option(config: RunConfig) -> None:
    """A cluster run needs Ray installed here and an address it understands (SpecError, one line, if not)."""
    import importlib.util  # inner: only a cluster run asks

    address = config.cluster
    if not (address in ("auto", "ray") or address.startswith("ray://") or address.rpartition(":")[2].isdigit()):
        raise SpecError(f"--cluster {address!r}: use auto, ray, ray://HOST:PORT or HOST:PORT")
    if importlib.util.find_spec("ray") is None:
        raise SpecError("--cluster needs Ray, which is not installed: pip install 'solbench[ray]'")
    if config.device.startswith("cuda:"):
        raise SpecError("--cluster gives each actor one GPU of its own: use --device cuda or auto, not "
                        f"{config.device}")


def choose_devices(config: RunConfig, devices: str | Sequence[str | int] | None = None) -> list[str]:
    """The devices a run spreads over: `devices` (CUDA indices or names) when given, else every visible
    GPU for `device` "auto"/"cuda", else the one device named. Only "auto" falls back to the CPU when no
    GPU is visible (`auto_fallback_note` says so); an explicit CUDA device that is not there raises
    DeviceUnavailableError."""
    if isinstance(devices, str):
        devices = [d.strip() for d in devices.split(",") if d.strip()]
    if config.cluster:
        if devices:
            raise SpecError("--devices picks GPUs of this host; with --cluster use --cluster-actors N")
        return [f"cluster {config.cluster}"]  # each actor picks its device on its own node
    device = config.resolved_device()
    if device == "cpu":
        if devices:
            raise SpecError("--devices needs CUDA devices, but the run is on the CPU")
        return ["cpu"]
    visible = visible_cuda_devices()
    if not visible and config.device != "auto":
        raise DeviceUnavailableError(f"device {config.device!r} was asked for, but {no_gpu_reason()}; "
                                     f"use device 'cpu', or 'auto' (every visible GPU, else the CPU)")
    if devices:
        wanted = [d if str(d).startswith("cuda") else f"cuda:{d}" for d in map(str, devices)]
        unknown = [d for d in wanted if d not in visible]
        if unknown:
            raise SpecError(f"devices {unknown} are not visible (visible: {visible or 'none'})")
        return wanted
    if config.device in ("auto", "cuda"):
        return visible or ["cpu"]  # no GPU: only "auto" gets here
    if device not in visible:
        raise SpecError(f"device {device} is not visible (visible: {visible or 'none'})")
    return [device]


def devices_from_options(device: str, devices: str | Sequence[str | int] | None,
                         cluster: str | None = None) -> list[str] | None:
    """The devices `choose_devices` returns for these options when the options alone decide it (the CPU,
    CUDA devices named by index), known before torch is imported or CUDA asked; None where only the machine
    can tell (every visible GPU) or the options are not plainly valid. A guess to start workers early on:
    the caller still compares it with `choose_devices`'s answer and uses it only where the two are equal."""
    if isinstance(devices, str):
        devices = [d.strip() for d in devices.split(",") if d.strip()]
    if cluster:
        return None
    if device == "cpu":
        return None if devices else ["cpu"]
    if not (device in ("auto", "cuda") or re.fullmatch(r"cuda:\d+", device)):
        return None
    if not devices:
        return [device] if device.startswith("cuda:") else None
    named = [str(d) for d in devices]
    if not all(re.fullmatch(r"(cuda:)?\d+", d) for d in named):
        return None
    return [d if d.startswith("cuda") else f"cuda:{d}" for d in named]


def auto_fallback_note(config: RunConfig, devices: list[str]) -> str | None:
    """What to tell the user when device "auto" found no GPU and the run goes to the CPU."""
    if config.device == "auto" and devices == ["cpu"]:
        return f"device auto: {no_gpu_reason()}, so the run is on the CPU"
    return None


def default_sol_hardware(declared: tuple[str, ...] | list[str] | None) -> str:
    """The GPU whose speed-of-light bounds a run shows when it runs on none and names none (a CPU run
    without --hw): the first of the solution's `target_hardware` labels that names a known spec (the
    official solutions say B200), else DEFAULT_SOL_HW."""
    for name in declared or []:
        try:
            return load_spec(str(name)).name
        except UnknownHardwareError:
            continue  # "LOCAL" and other labels name no spec
    return DEFAULT_SOL_HW


def read_baseline_csv(path: Path) -> dict[str, float]:
    """workload uuid -> baseline ms from a CSV with `workload_uuid` and `baseline_ms` columns."""
    if not path.is_file():
        raise SpecError(f"baseline CSV {path} does not exist")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or not {"workload_uuid", "baseline_ms"} <= set(reader.fieldnames):
            raise SpecError(f"{path}: a baseline CSV needs the columns workload_uuid and baseline_ms")
        baselines = {}
        for line, row in enumerate(reader, 2):
            try:
                value = float(row["baseline_ms"])
            except (TypeError, ValueError):
                raise SpecError(f"{path}:{line}: baseline_ms {row['baseline_ms']!r} is not a number") from None
            if not value > 0:
                raise SpecError(f"{path}:{line}: baseline_ms must be positive")
            baselines[row["workload_uuid"]] = value
    return baselines


def cuda_available() -> bool:
    """Whether CUDA is usable, without initialising it in this (orchestrator) process, and without importing
    torch where NVML can tell (`devices`)."""
    return cuda_device_count() > 0


def no_gpu_reason() -> str:
    """Why no CUDA GPU is visible, in the words a user can act on."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return "no CUDA GPU is visible (CUDA_VISIBLE_DEVICES is empty)"
    try:
        import torch  # see cuda_available
    except ImportError:
        return "no CUDA GPU is visible (torch is not installed)"
    if torch.version.cuda is None:
        return f"no CUDA GPU is visible (this torch {torch.__version__} is built without CUDA)"
    return "no CUDA GPU is visible (torch.cuda.is_available() is False: no GPU or no driver)"


def visible_cuda_devices() -> list[str]:
    return [f"cuda:{i}" for i in range(cuda_device_count())]
