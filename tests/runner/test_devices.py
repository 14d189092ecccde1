"""Listing a run's CUDA devices through NVML, before torch is imported (orchestrator.devices).

NVML is faked at its boundary (tests/timing/fake_nvml.py); torch's build is read from a version file.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from solbench.orchestrator import devices
from solbench.orchestrator.config import RunConfig, choose_devices, cuda_available
from solbench.timing.nvml import NvmlError
from tests.timing.fake_nvml import FakeGpu, FakeNvml


def four_gpus(**extra) -> FakeNvml:
    return FakeNvml([FakeGpu(uuid=f"GPU-{i}", bus_id=f"00000000:{65 + i}:00.0", **extra) for i in range(4)])


@pytest.fixture
def cuda_torch(monkeypatch):
    """A torch whose version file says it was built with CUDA 13.0 (the machine's own torch may not be)."""
    monkeypatch.setattr(devices, "torch_cuda_version", lambda: "13.0")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize("variable, expected", [
    (None, 4), ("0,1,2,3", 4), ("2", 1), ("3,1", 2),
    ("0,7,1", 1),  # CUDA stops at the first index that is no GPU of the host
    ("-1", 0), ("1,-1,0", 1),
])
def test_visible_indices_follow_cudas_rules(variable, expected):
    assert devices.visible_indices(variable, 4) == expected


@pytest.mark.parametrize("variable", ["GPU-8f2a", "MIG-GPU-8f2a/1/0", "0,0", "0,,1", "0,GPU-1"])
def test_visible_indices_leave_uuids_mig_names_and_repeats_to_cuda(variable):
    assert devices.visible_indices(variable, 4) is None


def test_nvml_counts_the_gpus_cuda_would_see(cuda_torch, monkeypatch):
    fake = four_gpus()
    assert devices.nvml_device_count(fake) == 4
    assert "shutdown" in fake.names_called()  # the driver's NVML handle is not kept open
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert devices.nvml_device_count(four_gpus()) == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert devices.nvml_device_count(four_gpus()) == 0


def test_mig_no_nvml_or_a_failing_call_leave_the_count_to_torch(cuda_torch):
    assert devices.nvml_device_count(four_gpus(mig=True)) is None
    assert devices.nvml_device_count(FakeNvml(available=False)) is None
    failing = four_gpus()
    failing.fail["device_count"] = NvmlError("UNKNOWN", "driver went away")
    assert devices.nvml_device_count(failing) is None


def test_a_torch_without_cuda_sees_no_gpu_whatever_nvml_lists(monkeypatch):
    monkeypatch.setattr(devices, "torch_cuda_version", lambda: None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake = four_gpus()
    assert devices.nvml_device_count(fake) == 0
    assert fake.calls == []  # NVML was not even asked


def test_the_count_falls_back_to_torch_where_nvml_cannot_tell(monkeypatch):
    monkeypatch.setattr(devices, "nvml_device_count", lambda nvml=None: None)
    monkeypatch.setattr(devices, "torch_device_count", lambda: 3)
    assert devices.cuda_device_count() == 3
    monkeypatch.setattr(devices, "nvml_device_count", lambda nvml=None: 2)
    assert devices.cuda_device_count() == 2


def test_choose_devices_uses_the_nvml_count(monkeypatch):
    monkeypatch.setattr(devices, "nvml_device_count", lambda nvml=None: 4)
    monkeypatch.setattr(devices, "torch_device_count", lambda: pytest.fail("torch was asked"))
    assert cuda_available()
    assert choose_devices(RunConfig(device="auto")) == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert choose_devices(RunConfig(device="cuda"), "1,3") == ["cuda:1", "cuda:3"]


@pytest.mark.parametrize("text, expected", [
    ("__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n", "13.0"),
    ("cuda = None\n", None),
    ('cuda = "12.8"\n', "12.8"),
    ("cuda = get_cuda()\n", False),  # not said plainly: torch is asked instead
    ("__version__ = '2.11.0'\n", False),
])
def test_torchs_cuda_is_read_from_its_version_file(text, expected):
    assert devices.cuda_in_version_file(text) == expected


def test_this_machines_torch_version_file_agrees_with_torch():
    import torch

    assert devices.torch_cuda_version() == torch.version.cuda


def test_a_run_that_cannot_use_cuda_after_all_is_told_why():
    import torch

    assert devices.check_torch_sees(["cpu"]) is None
    if torch.cuda.is_available():
        assert devices.check_torch_sees([f"cuda:{torch.cuda.device_count()}"]) is not None
    else:
        assert "cannot use CUDA" in devices.check_torch_sees(["cuda:0"])


def test_the_driver_lists_devices_and_opens_sessions_without_torch():
    code = ("import sys\n"
            "from solbench.orchestrator import analysis, scheduler, session\n"
            "from solbench.orchestrator.config import RunConfig, choose_devices\n"
            "from solbench.sol import cache\n"
            "choose_devices(RunConfig(device='auto'))\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_compute_capability_of_the_device_cuda_would_number(monkeypatch):
    """The orchestrator's view of a device's architecture (cuTile is SKIPPED on Hopper without a worker):
    `cuda:N` is the N-th entry of CUDA_VISIBLE_DEVICES, where it is an index NVML can follow."""
    capability = devices.compute_capability.__wrapped__  # uncached: each case its own fake
    fake = FakeNvml([FakeGpu(uuid="GPU-a", capability=(9, 0)), FakeGpu(uuid="GPU-b", capability=(10, 0))])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert capability("cuda", fake) == (9, 0) and capability("cuda:1", fake) == (10, 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert capability("cuda:0", fake) == (10, 0)
    assert capability("cuda:1", fake) is None  # not visible
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-b")
    assert capability("cuda:0", fake) is None  # a UUID: left to the worker
    assert capability("cpu", fake) is None
    assert capability("cuda:0", FakeNvml(available=False)) is None
