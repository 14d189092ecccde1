"""Telemetry: decoding, throttle verdicts, energy, device mapping, graceful absence of NVML."""

from __future__ import annotations

import pytest

from solbench.timing import telemetry
from solbench.timing.nvml import NvmlError
from solbench.timing.telemetry import (
    Telemetry,
    decode_throttle_reasons,
    energy_per_call_mj,
    is_throttled,
    read_clocks,
    resolve_handle,
)

from .fake_nvml import FakeGpu, FakeNvml


def test_decode_throttle_reasons():
    assert decode_throttle_reasons(0) == []
    assert decode_throttle_reasons(0x1) == ["gpu_idle"]
    assert decode_throttle_reasons(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert decode_throttle_reasons(0x1000) == ["bit_0x1000"]


@pytest.mark.parametrize(("reasons", "plain", "with_cap"), [
    ([], False, False), (["gpu_idle"], False, False), (["sw_power_cap"], False, True),
    (["hw_thermal_slowdown"], True, True), (["sw_thermal_slowdown"], True, True),
    (["hw_power_brake_slowdown"], True, True), (["hw_slowdown", "gpu_idle"], True, True)])
def test_is_throttled(reasons, plain, with_cap):
    reading = {"throttle_reasons": reasons}
    assert is_throttled(reading) is plain
    assert is_throttled(reading, include_power_cap=True) is with_cap


def test_is_throttled_without_reading():
    assert is_throttled(None) is False and is_throttled({}) is False


def test_energy_per_call():
    assert energy_per_call_mj({"energy_mj": 1000}, {"energy_mj": 1500}, 50) == 10.0
    assert energy_per_call_mj({"energy_mj": 1000}, {"energy_mj": 1000}, 50) is None  # counter did not tick
    assert energy_per_call_mj({"energy_mj": 1000}, {"energy_mj": 900}, 50) is None  # reset / wrapped
    assert energy_per_call_mj({"energy_mj": None}, {"energy_mj": 900}, 50) is None
    assert energy_per_call_mj(None, {"energy_mj": 900}, 50) is None
    assert energy_per_call_mj({"energy_mj": 1}, {"energy_mj": 2}, 0) is None


def test_real_nvml_absent_degrades_to_none():
    """This machine has no NVIDIA driver: the real boundary fails and every reading is None."""
    t = Telemetry(0)
    try:
        t.nvml.init()
        pytest.skip("NVML is available here")
    except NvmlError as exc:
        # mapped to NVML's own error name, not a pynvml exception class or a crash
        assert exc.code in ("LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED", "NO_PERMISSION", "UNKNOWN")
    assert t.read() is None and t.sm_clock_mhz() is None and t.energy_mj() is None
    assert t.available is False and t.error


def test_read_clocks_without_nvml_is_none(monkeypatch):
    monkeypatch.setattr(telemetry, "_CACHE", {0: Telemetry(0, FakeNvml(available=False))})
    assert read_clocks(0) is None


def test_read_with_fake_nvml():
    gpu = FakeGpu(sm_mhz=1755, mem_mhz=2619, temperature_c=63, power_mw=512_345, energy_mj=42, throttle_mask=0x4)
    t = Telemetry(0, FakeNvml([gpu]))
    r = t.read()
    assert r["sm_mhz"] == 1755 and r["mem_mhz"] == 2619 and r["max_sm_mhz"] == 1980
    assert r["temperature_c"] == 63 and r["power_w"] == pytest.approx(512.345)
    assert r["throttle_reasons"] == ["sw_power_cap"] and r["throttle_mask"] == 4
    assert r["energy_mj"] == 42


def test_unsupported_fields_become_none():
    fake = FakeNvml()
    fake.fail["total_energy_mj"] = NvmlError("NOT_SUPPORTED")
    fake.fail["power_mw"] = NvmlError("NOT_SUPPORTED")
    r = Telemetry(0, fake).read()
    assert r["energy_mj"] is None and r["power_w"] is None and r["sm_mhz"] == 1980


def _two_gpus():
    return FakeNvml([FakeGpu(name="gpu0", uuid="GPU-aaaa", bus_id="00000000:01:00.0"),
                     FakeGpu(name="gpu1", uuid="GPU-bbbb", bus_id="00000000:02:00.0")])


def test_mapping_honours_cuda_visible_devices(monkeypatch):
    fake = _two_gpus()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert resolve_handle(fake, 0).name == "gpu1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb,GPU-aaaa")
    assert resolve_handle(fake, 0).name == "gpu1" and resolve_handle(fake, 1).name == "gpu0"
    with pytest.raises(NvmlError):
        resolve_handle(fake, 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234")
    with pytest.raises(NvmlError):
        resolve_handle(fake, 0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert resolve_handle(fake, 1).name == "gpu1"


def test_mapping_failure_leaves_telemetry_empty(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    t = Telemetry(0, _two_gpus())
    assert t.read() is None and "CUDA_VISIBLE_DEVICES" in t.error


@pytest.mark.gpu
def test_real_telemetry_on_gpu():
    import torch

    torch.cuda.init()
    r = Telemetry(torch.cuda.current_device()).read()
    assert r is not None and r["sm_mhz"] > 0 and r["mem_mhz"] > 0


def test_the_maximum_sm_clock_is_asked_of_nvml_once_per_device():
    """Every timed block asks for it twice (the hold's cycles, the clock warm-up); the board's limit does
    not change, and each NVML call is host time inside a verdict."""
    nvml = FakeNvml([FakeGpu()])
    t = Telemetry(0, nvml=nvml)
    first = t.max_sm_clock_mhz()
    assert first is not None and [t.max_sm_clock_mhz(), t.read()["max_sm_mhz"]] == [first, first]
    assert nvml.names_called().count("max_clock_mhz") == 1
    absent = Telemetry(0, nvml=FakeNvml(available=False))
    assert absent.max_sm_clock_mhz() is None and absent.max_sm_clock_mhz() is None
