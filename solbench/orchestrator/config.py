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
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from solbench.orchestrator.devices import cuda_device_count
from solbench.sol.hardware import HardwareSpec, UnknownHardwareError, load_spec
from solbench.spec.errors import SpecError
from solbench.timing.config import TimingConfig

# `--quick` / `--solbench-quick` / `quick=True`: a smoke test of the pipeline; its timings mean nothing.
QUICK_SETTINGS: dict[str, Any] = {"trials": 1, "warmup": 1, "iters": 3, "adaptive": False, "timing_rounds": 1}
# The GPU whose bounds are shown where a run names none and runs on none: the official set targets it.
DEFAULT_SOL_HW = "B200"


class DeviceUnavailableError(SpecError):
    """A device was asked for by name and this machine cannot provide it (no silent fallback)."""


@dataclass(frozen=True)
class Option:
    """How a `RunConfig` field is offered to users: the one option table that `solbench run`'s flags and the
    pytest plugin's options are generated from (`orchestrator.options`). The CLI's flag is `--FLAG`, the
    plugin's `--solbench-FLAG` (`plugin_flag` where that name is taken by a gate-only option); a bool field
    gets `--FLAG` and `--no-FLAG`, or, with `choices`, one flag taking the false word or the true one."""

    flag: str
    help: str
    metavar: str | None = None
    choices: tuple[str, str] | None = None  # a bool field's (false, true) words: --baseline eager|compile
    repeat: bool = False  # a list field: the flag may be given several times
    gate_default: Any = None  # the pytest gate's default, where it differs from the field's (its help says why)
    plugin_flag: str | None = None


def option(flag: str, help: str, default: Any = MISSING, **details: Any) -> Any:
    """A `RunConfig` field offered as an option (`Option`); a list field defaults to a new empty list."""
    metadata = {"option": Option(flag, help, **details)}
    if default is MISSING:
        return field(default_factory=list, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class RunConfig:
    device: str = option("device", "auto (every visible GPU, else the CPU), cpu, cuda or cuda:N", "auto")
    trials: int = option("trials", "correctness trials per workload, each with fresh inputs", 3, metavar="N")
    warmup: int | None = option("warmup", "minimum warm-up calls per timed block (default: the timer's for the "
                                "device)", None, metavar="N")
    iters: int | None = option("iters", "minimum timed iterations per workload and side, shared by its "
                               "interleaved timing rounds (default: the timer's)", None, metavar="N")
    adaptive: bool = option("adaptive", "keep timing until the median's confidence interval is tight "
                            "(--no-adaptive: --iters iterations, rounded up to a multiple of the rounds)", True)
    target_rel_ci: float | None = option("target-ci", "stop timing when the median's CI half-width is below this "
                                         "fraction of the median (default: the timer's)", None, metavar="X")
    max_time_s: float | None = option("max-time", "seconds of adaptive timing per timed block (default: the "
                                      "timer's)", None, metavar="SECONDS")
    fresh_inputs_budget_s: float | None = option(
        "fresh-inputs-budget", "time per timed block spent drawing fresh inputs for every call (default 3); 0 "
        "rotates the fixed timed input sets instead (flagged timed_inputs_fixed)", None, metavar="SECONDS")
    launch_hold: bool = option("launch-hold", "CUDA: hold the stream while the host queues each timed call, so "
                               "event times exclude this host's launch latency (docs/timing.md)", True)
    cuda_graphs: bool = option("cuda-graphs", "CUDA: capture each call as a CUDA graph and time its replays "
                               "(solution, reference and baselines alike); calls that cannot be captured are timed "
                               "as launched, flagged cuda_graph_unavailable (docs/timing.md)", True)
    power_cap_stop: bool = option("power-cap-stop", "CUDA: a block of calls of a millisecond or more stops at its "
                                  "minimum length, CI target or not, when NVML says the board is at its power or a "
                                  "thermal limit, flagged power_capped (docs/timing.md)", True)
    timing_rounds: int | None = option("timing-rounds", "interleaved reference/solution timed blocks per workload, "
                                       "so drift hits both alike (default: 2 on a GPU; on the CPU 6 for calls under "
                                       "20 ms, sharing one block's budget, else 1)", None, metavar="N")
    timed_input_sets: int = 2  # distinct input sets rotated through the timed iterations
    checked_timed_outputs: int = 3  # timed iterations whose outputs are verified too
    time_reference: bool = option("reference-timing", "time the reference", True)
    strict: bool = option("strict", "fail outputs the official tolerance accepts but the numerics flags catch (far "
                          "outliers, mismatches concentrated in whole rows or columns, a systematic bias; "
                          "docs/anticheat.md). A run reports them by default; the CI gate fails them by default, "
                          "as a gate guards what is merged", False, gate_default=True)
    timeout_s: float = option("timeout", "seconds per worker request (one trial, one timed block)", 300.0,
                              metavar="SECONDS")
    compile_timeout_s: float = option("compile-timeout", "seconds to build a CUDA solution", 600.0,
                                      metavar="SECONDS")
    max_workloads: int | None = option("max-workloads", "only the first N workloads of each problem", None,
                                       metavar="N")
    data_roots: list[Path] = option("data-root", "folder to resolve safetensors inputs against; repeatable",
                                    metavar="DIR", repeat=True)
    seed: int | None = option("seed", "input seed (default: a secret random seed per run)", None, metavar="N")
    hw: str | None = option("hw", "hardware spec for speed-of-light figures (default: the running GPU's; without "
                            "one, the solution's target_hardware, else B200); `solbench hw list`", None, metavar="NAME")
    lock_clocks: bool = option("lock-clocks", "lock each GPU's clocks (from its hardware spec, NVML) for the run "
                               "and restore them after; needs root", False)
    baseline_shipped: bool = option("shipped-baseline", "time the optimised baseline shipped with a problem "
                                    "(reference_impls/<group>/<name>.baseline.py or <problem>/baseline.py)", True)
    baseline_compile: bool = option("baseline", "baselines to time besides the eager reference and the shipped "
                                    "baseline: 'compile' adds torch.compile of the reference", False,
                                    choices=("eager", "compile"), plugin_flag="baseline-timing")
    baseline_ms: dict[str, float] = field(default_factory=dict)  # workload uuid -> published baseline time
    # On a GPU, solution outputs of at least this many bytes reach the reference worker by CUDA IPC
    # instead of as bytes through the orchestrator (solbench.worker.transfer); None: always bytes. On an
    # H100 (benchmarks/judge_transfer.py, 3 trials and 4 checked outputs) the two paths cost the same at
    # 2 and 8 MiB, and IPC saved 0.2 s per workload at 24 MiB and 0.46 s at 48 MiB.
    ipc_min_bytes: int | None = 16 << 20
    cluster: str | None = option("cluster", "run over a Ray cluster, one actor per GPU: auto (a running cluster, "
                                 "else a local one), ray (a running one), ray://HOST:PORT or HOST:PORT (the head's "
                                 "GCS); needs solbench[ray] (docs/cluster.md)", None, metavar="ADDRESS")
    cluster_actors: int | None = option("cluster-actors", "with --cluster: at most N session actors (default: one "
                                        "per GPU of the cluster; on CPUs one per node)", None, metavar="N")

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise SpecError("trials (--trials) must be at least 1")
        if self.timing_rounds is not None and self.timing_rounds < 1:
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
                max_time_s=self.max_time_s, launch_hold=self.launch_hold, cuda_graphs=self.cuda_graphs,
                power_cap_stop=self.power_cap_stop)
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


def default_sol_hardware(declared: Sequence[str] | None) -> str:
    """The GPU whose speed-of-light bounds a run shows when it runs on none and names none (a CPU run
    without --hw): the first of the solution's `target_hardware` labels that names a known spec (the
    official solutions say B200), else DEFAULT_SOL_HW."""
    for name in declared or []:
        try:
            return load_spec(str(name)).name
        except UnknownHardwareError:
            continue  # "LOCAL" and other labels name no spec
    return DEFAULT_SOL_HW


def sol_hardware(hw: str | None, running: HardwareSpec | None, on_gpu: bool,
                 target_hardware: Sequence[str] | None = ()) -> HardwareSpec | None:
    """The GPU whose speed-of-light bounds a result shows (`solbench run` and `solbench sol` alike): `hw`
    (--hw) when given; else, on a GPU, the running one (`running`, None where it has no spec); else the
    solution's target GPU (`default_sol_hardware`). An unknown `hw` raises UnknownHardwareError."""
    if hw:
        return load_spec(hw)
    if on_gpu:
        return running
    return load_spec(default_sol_hardware(target_hardware))


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
