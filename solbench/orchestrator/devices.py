"""Which CUDA devices a run can use, known without importing torch where NVML can tell.

A run's driver used to import torch and ask CUDA for the device count before anything else: 2.8 s alone
and 3.3 s beside eight workers starting, on a 4-GPU H200 host (benchmarks/startup_profile.py), with every
later start-up step waiting on it. NVML answers in 0.1 s. It sees the same GPUs CUDA does, with three
exceptions, where the count comes from torch as before:

- `CUDA_VISIBLE_DEVICES` naming GPUs by UUID or MIG instance, or by indices that repeat (CUDA's rules
  there are its own);
- a GPU in MIG mode (CUDA then sees instances, not the GPU);
- no NVML (no driver library, no nvidia-ml-py) or a torch whose build says nothing about CUDA.

A torch built without CUDA sees no GPU, whatever NVML says. A CUDA that fails at start-up although NVML
works (e.g. a driver older than torch's CUDA) is found when the run imports torch: `check_torch_sees`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Callable
from typing import TypeVar

from solbench.timing.nvml import NvmlBoundary, NvmlError

T = TypeVar("T")


def torch_cuda_version() -> str | None | bool:
    """torch's `version.cuda` read from its version file without importing torch: the CUDA version, None
    for a build without CUDA, False when torch or the file cannot be read (the caller then asks torch)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    try:
        with open(path, encoding="utf-8") as f:
            return cuda_in_version_file(f.read())
    except OSError:
        return False


def cuda_in_version_file(text: str) -> str | None | bool:
    """The `cuda` value of a torch/version.py (`cuda: Optional[str] = '13.0'`, or `cuda = None`); False
    when the file does not say it plainly."""
    match = re.search(r"^cuda(?:\s*:[^=\n]*)?\s*=\s*(None|'[^']*'|\"[^\"]*\")\s*$", text, re.MULTILINE)
    if match is None:
        return False
    value = match.group(1)
    return None if value == "None" else value[1:-1]


def visible_indices(variable: str | None, physical: int) -> int | None:
    """How many devices CUDA enumerates under `CUDA_VISIBLE_DEVICES`=`variable` on a host with `physical`
    GPUs: every GPU when unset; else the listed indices up to the first that is not a GPU of the host
    (CUDA stops there). None where that rule is not enough (UUIDs, MIG names, repeated indices)."""
    if variable is None:
        return physical
    entries = [e.strip() for e in variable.split(",")]
    count, seen = 0, set()
    for entry in entries:
        if not re.fullmatch(r"-?\d+", entry):
            return None
        index = int(entry)
        if index < 0 or index >= physical:
            return count
        if index in seen:
            return None
        seen.add(index)
        count += 1
    return count


def nvml_device_count(nvml: NvmlBoundary | None = None) -> int | None:
    """The number of CUDA devices this process would see, from NVML and the environment; None when only
    CUDA itself can tell (see the module's docstring)."""
    variable = os.environ.get("CUDA_VISIBLE_DEVICES")
    if variable is not None and variable.strip() == "":
        return 0
    cuda = torch_cuda_version()
    if cuda is False:
        return None
    if cuda is None:
        return 0  # a CPU-only torch
    def count(nvml: NvmlBoundary) -> int | None:
        physical = nvml.device_count()
        if any(nvml.mig_enabled(nvml.handle_by_index(index)) for index in range(physical)):
            return None
        return visible_indices(variable, physical)
    return nvml_query(count, nvml)


def nvml_query(query: Callable[[NvmlBoundary], T], nvml: NvmlBoundary | None = None) -> T | None:
    """`query(nvml)` between NVML's init and shutdown; None where NVML is missing or a call fails."""
    nvml = nvml or NvmlBoundary()
    try:
        nvml.init()
    except NvmlError:
        return None
    try:
        return query(nvml)
    except NvmlError:
        return None
    finally:
        nvml.shutdown()


def torch_device_count() -> int:
    """The CUDA device count as torch sees it (imports torch; CUDA's own enumeration)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return 0
    try:
        import torch  # heavy: only where NVML could not tell
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cuda_device_count() -> int:
    """CUDA devices visible to this process: NVML's answer where it is enough, else torch's."""
    count = nvml_device_count()
    return torch_device_count() if count is None else count


def check_torch_sees(devices: list[str]) -> str | None:
    """After the run's own torch import: why torch cannot use the CUDA devices the run chose, or None.
    (NVML found them; a torch whose CUDA fails to start would otherwise fail in every worker.)"""
    if not any(d.startswith("cuda") for d in devices):
        return None
    import torch  # imported by the run already

    if not torch.cuda.is_available():
        return (f"NVML lists GPUs but this torch {torch.__version__} cannot use CUDA "
                f"(torch.cuda.is_available() is False: a driver older than its CUDA {torch.version.cuda}?); "
                "use --device cpu")
    count = torch.cuda.device_count()
    missing = [d for d in devices if d.startswith("cuda:") and int(d.split(":")[1]) >= count]
    if missing:
        return f"devices {missing} are not visible to CUDA ({count} device(s))"
    return None


@functools.cache
def compute_capability(device: str, nvml: NvmlBoundary | None = None) -> tuple[int, int] | None:
    """The (major, minor) compute capability of a `cuda[:N]` device, from NVML without starting CUDA in this
    process; None for other devices and where NVML cannot tell (UUIDs in CUDA_VISIBLE_DEVICES, MIG)."""
    if not device.startswith("cuda"):
        return None
    index = int(device.partition(":")[2] or 0)
    variable = os.environ.get("CUDA_VISIBLE_DEVICES")
    if variable is not None:
        entries = [e.strip() for e in variable.split(",")]
        if index >= len(entries) or not entries[index].isdigit():
            return None
        index = int(entries[index])
    return nvml_query(lambda nvml: nvml.cuda_capability(nvml.handle_by_index(index)), nvml)
