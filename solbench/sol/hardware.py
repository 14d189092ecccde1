"""Hardware specs: peak rates, bandwidth and caches of one GPU, loaded from `hw_specs/*.json`.

Specs are looked up, in order, in the folders of `$SOLBENCH_HW_SPECS` (os.pathsep-separated) and the
repository's `hw_specs/`, the one copy (`solbench/sol/hw_specs` is a link to it, so wheels ship the same
files). The first file defining a name wins. Adding a GPU is adding one JSON file there.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path

from solbench.spec.errors import SpecError
from solbench.timing.nvml import NvmlBoundary
from solbench.timing.telemetry import resolve_handle

PACKAGE_SPECS_DIR = Path(__file__).resolve().parent / "hw_specs"
REPO_SPECS_DIR = Path(__file__).resolve().parents[2] / "hw_specs"
ENV_VAR = "SOLBENCH_HW_SPECS"


class UnknownHardwareError(SpecError):
    """No spec matches a GPU name; the message lists the known ones."""


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    hbm_bandwidth_gbps: float  # GB/s, 1 GB = 1e9 bytes
    bf16_tflops: float  # dense tensor-core rates, TFLOP/s; None where the GPU has no such unit
    fp16_tflops: float
    tf32_tflops: float | None
    fp32_simt_tflops: float  # non-tensor fp32 (an FMA counts as 2 FLOPs)
    fp64_tflops: float | None = None
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    int8_tops: float | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    sm_count: int | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    clocks_locked: bool = False
    # --lock-clocks (timing/clock_lock.py): an SM clock the part sustains under full load without power
    # throttling (below its maximum boost), and the memory clock to lock (None: the highest supported one;
    # HBM parts run a single memory clock, which differs between SKUs). None: no preset, set it by hand.
    lock_sm_mhz: int | None = None
    lock_mem_mhz: int | None = None
    measured: bool = False
    description: str = ""
    aliases: tuple[str, ...] = ()
    reject_with: str | None = None  # spec whose (higher) rates bound what this GPU can ever do
    based_on: str | None = None  # for measured specs: the datasheet spec of the same GPU
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_bandwidth_gbps * 1e9

    def matmul_tflops(self, dtype: str) -> float:
        """Dense tensor-core rate for a matmul whose operands are `dtype` (definition dtype name).

        fp32 operands map to TF32 (what a tensor-core kernel uses within the usual 1e-2 tolerances);
        a dtype the GPU has no unit for falls back to the next wider unit it has.
        """
        chain = {
            "float64": ("fp64_tflops", "fp32_simt_tflops"),
            "float32": ("tf32_tflops", "fp32_simt_tflops"),
            "bfloat16": ("bf16_tflops",),
            "float16": ("fp16_tflops",),
            "float8": ("fp8_tflops", "bf16_tflops"),
            "float4": ("fp4_tflops", "fp8_tflops", "bf16_tflops"),
            "int8": ("int8_tops", "fp8_tflops", "bf16_tflops"),
        }[dtype_family(dtype)]
        for attr in chain:
            value = getattr(self, attr)
            if value:
                return float(value)
        return float(self.bf16_tflops)

    def fastest_matmul_tflops(self) -> float:
        """The highest tensor rate of any dtype: what a kernel free to pick its precision could reach."""
        return max(float(v) for v in (self.bf16_tflops, self.fp16_tflops, self.tf32_tflops, self.fp8_tflops,
                                      self.fp4_tflops, self.int8_tops, self.fp64_tflops) if v)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["aliases"] = list(self.aliases)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> HardwareSpec:
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise SpecError(f"hardware spec {data.get('name')!r} has unknown keys {sorted(unknown)}")
        for key in ("name", "hbm_bandwidth_gbps", "bf16_tflops", "fp16_tflops", "fp32_simt_tflops"):
            if data.get(key) in (None, ""):
                raise SpecError(f"hardware spec {data.get('name')!r} has no {key}")
        values = dict(data)
        values["aliases"] = tuple(values.get("aliases") or ())
        values["sources"] = dict(values.get("sources") or {})
        values.setdefault("tf32_tflops", None)
        return cls(**values)


def dtype_family(dtype: str) -> str:
    """Group definition dtypes by the tensor-core unit that would run them."""
    if dtype.startswith("float8"):
        return "float8"
    if dtype.startswith("float4"):
        return "float4"
    if dtype in ("int8", "uint8"):
        return "int8"
    if dtype in ("float64", "float32", "bfloat16", "float16"):
        return dtype
    return "float32"  # wider ints and bool: no tensor unit; treat like fp32


def normalize(name: str) -> str:
    """Case, punctuation and vendor prefix do not matter: 'NVIDIA H100-SXM' == 'h100_sxm'."""
    text = re.sub(r"[^a-z0-9]", "", name.lower())
    return text.removeprefix("nvidia")


def search_dirs() -> list[Path]:
    dirs = [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    dirs += [REPO_SPECS_DIR, PACKAGE_SPECS_DIR]
    return [d for d in dirs if d.is_dir()]


def _read_all() -> dict[str, tuple[HardwareSpec, Path]]:
    specs: dict[str, tuple[HardwareSpec, Path]] = {}
    for directory in search_dirs():
        for path in sorted(directory.glob("*.json")):
            try:
                spec = HardwareSpec.from_dict(json.loads(path.read_text()))
            except (json.JSONDecodeError, TypeError) as exc:
                raise SpecError(f"{path}: not a hardware spec: {exc}") from None
            except SpecError as exc:
                raise exc.located(str(path)) from None
            specs.setdefault(spec.name, (spec, path))
    return specs


def list_specs() -> list[HardwareSpec]:
    return [spec for spec, _ in sorted(_read_all().values(), key=lambda sp: sp[0].name)]


def spec_path(name: str) -> Path:
    spec = load_spec(name)
    return _read_all()[spec.name][1]


def load_spec(name: str) -> HardwareSpec:
    """The spec whose name or alias matches `name` (case, spaces, '-'/'_' and 'NVIDIA' ignored)."""
    key = normalize(name)
    specs = list_specs()
    for spec in specs:  # exact names first, so an alias never shadows a real name
        if normalize(spec.name) == key:
            return spec
    for spec in specs:
        if key in {normalize(a) for a in spec.aliases}:
            return spec
    known = ", ".join(s.name for s in specs) or "(none found)"
    raise UnknownHardwareError(f"no hardware spec for {name!r}; known: {known}. Use --hw NAME to pick one, "
                               f"or `solbench hw calibrate` to measure this GPU")


def device_name(device_index: int = 0) -> str:
    """The GPU's marketing name from NVML (falls back to torch when NVML is unavailable), for the CUDA
    device `device_index` of this process: through `CUDA_VISIBLE_DEVICES`, which NVML ignores (a Ray actor
    given GPU 2 sees it as its device 0). Asked once per process and device: every workload's
    faster-than-light check asks, and an NVML start and stop cost tens of milliseconds each time."""
    return _device_name(device_index, os.environ.get("CUDA_VISIBLE_DEVICES"))


@lru_cache(maxsize=16)
def _device_name(device_index: int, visible: str | None) -> str:
    # `visible` is only the cache's key: `resolve_handle` reads CUDA_VISIBLE_DEVICES itself
    nvml = NvmlBoundary()
    try:
        nvml.init()
        try:
            return nvml.name(resolve_handle(nvml, device_index))
        finally:
            nvml.shutdown()
    except Exception as nvml_error:  # NVML missing, no driver, no GPU, a MIG instance
        try:
            import torch

            if torch.cuda.is_available():
                return torch.cuda.get_device_name(device_index)
        except Exception:
            pass
        raise UnknownHardwareError(f"cannot query GPU {device_index} (no NVML/CUDA device: {nvml_error}); "
                                   f"pass --hw NAME to choose a spec") from None


def detect_spec(device_index: int = 0) -> HardwareSpec:
    """The spec of the running GPU; an unknown GPU is an error, never a guess."""
    name = device_name(device_index)
    try:
        return load_spec(name)
    except UnknownHardwareError as exc:
        raise UnknownHardwareError(f"GPU {device_index} is {name!r}: {exc}") from None
