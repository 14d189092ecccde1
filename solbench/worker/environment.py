"""What a trace records about the machine it was measured on, read in the worker that measured."""

from __future__ import annotations

import os
import platform
import socket
import sys

import torch

from solbench.worker import sandbox


def _cores() -> list[int] | None:
    """The cores this worker may run on (both CPU workers of a run share them: orchestrator.cpu_cores)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def collect_environment(device: str) -> dict:
    env = {"device": "cuda" if device.startswith("cuda") else "cpu", "hardware": platform.processor() or platform.machine(),
           "driver": None, "cuda": torch.version.cuda, "torch": torch.__version__, "triton": None,
           "python": sys.version.split()[0], "hostname": socket.gethostname(),
           "sandbox": dict(sandbox.APPLIED), "cpu_threads": None if device.startswith("cuda") else torch.get_num_threads(),
           "cpu_cores": None if device.startswith("cuda") else _cores()}
    try:
        import triton  # optional dependency

        env["triton"] = triton.__version__
    except Exception:  # noqa: BLE001 - triton is optional
        pass
    if env["device"] == "cuda":
        env["hardware"] = torch.cuda.get_device_name(0)
        try:
            import pynvml  # optional at run time: NVML may be absent

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            env["driver"] = driver.decode() if isinstance(driver, bytes) else driver
        except Exception:  # noqa: BLE001 - NVML is optional
            pass
    return env
