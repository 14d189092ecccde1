"""Clock locking against the fake NVML: presets, lock + verify, failures restore, clear errors."""

from __future__ import annotations

import json

import pytest

from solbench.sol.hardware import list_specs, load_spec
from solbench.timing.clock_lock import ClockLock, ClockLockError, find_preset
from solbench.timing.nvml import NvmlError

from .fake_nvml import FakeGpu, FakeNvml


def _lock(fake: FakeNvml, **kw) -> ClockLock:
    kw.setdefault("env", {})
    return ClockLock(0, nvml=fake, sleep=lambda s: None, settle_s=0.0, **kw)


@pytest.mark.parametrize(("name", "match", "sm", "mem"), [
    ("NVIDIA H100 80GB HBM3", "H100_SXM", 1410, None), ("NVIDIA H100 PCIe", "H100_PCIE", 1410, 1593),
    ("NVIDIA H200", "H200_SXM", 1410, None), ("NVIDIA B200", "B200", 1500, 3996),
    ("NVIDIA A100-SXM4-80GB", "A100_SXM", 1065, None)])
def test_preset_comes_from_the_gpus_hardware_spec(name, match, sm, mem):
    p = find_preset(name, env={})
    assert (p.match, p.sm_mhz, p.mem_mhz) == (match, sm, mem)
    spec = load_spec(name)
    assert (spec.lock_sm_mhz, spec.lock_mem_mhz) == (sm, mem)  # one home: the spec


def test_a_gpu_without_a_spec_or_without_clocks_in_it_has_no_preset():
    assert find_preset("NVIDIA GH200 480GB", env={}) is None  # no hardware spec
    assert find_preset("NVIDIA GB200", env={}) is None  # a spec, but no lock clocks in it


def test_a_measured_spec_takes_its_datasheet_specs_clocks(tmp_path, monkeypatch):
    measured = {**load_spec("H100_SXM").to_dict(), "name": "H100_MEASURED_HERE", "aliases": ["NVIDIA H100 TEST"],
                "measured": True, "based_on": "H100_SXM", "lock_sm_mhz": None, "lock_mem_mhz": None}
    (tmp_path / "measured.json").write_text(json.dumps(measured))
    monkeypatch.setenv("SOLBENCH_HW_SPECS", str(tmp_path))
    p = find_preset("NVIDIA H100 TEST", env={})
    assert (p.match, p.sm_mhz) == ("H100_SXM", 1410)


def test_unknown_gpu_has_no_preset_unless_env_says_so():
    assert find_preset("NVIDIA GeForce RTX 4090", env={}) is None
    p = find_preset("NVIDIA GeForce RTX 4090", env={"SOLBENCH_LOCK_SM_MHZ": "2000", "SOLBENCH_LOCK_MEM_MHZ": "10501"})
    assert (p.sm_mhz, p.mem_mhz) == (2000, 10501)
    with pytest.raises(ClockLockError):
        find_preset("NVIDIA GeForce RTX 4090", env={"SOLBENCH_LOCK_MEM_MHZ": "10501"})
    with pytest.raises(ClockLockError):
        find_preset("NVIDIA H100", env={"SOLBENCH_LOCK_SM_MHZ": "fast"})


def test_env_overrides_preset_sm_only():
    p = find_preset("NVIDIA H100 PCIe", env={"SOLBENCH_LOCK_SM_MHZ": "1200"})
    assert (p.sm_mhz, p.mem_mhz) == (1200, 1593)


def test_spec_clocks_are_plausible_data():
    locked = [spec for spec in list_specs() if spec.lock_sm_mhz is not None]
    assert len(locked) >= 5
    for spec in locked:
        assert 500 <= spec.lock_sm_mhz <= 3000 and (spec.lock_mem_mhz is None or 500 <= spec.lock_mem_mhz <= 10000)
        assert spec.sm_clock_mhz is None or spec.lock_sm_mhz <= spec.sm_clock_mhz  # sustained, not above boost


def test_lock_verify_and_restore():
    fake = FakeNvml()
    gpu = fake.gpus[0]
    with _lock(fake) as lock:
        assert (gpu.sm_mhz, gpu.mem_mhz) == (1410, 2619)
        assert lock.state.gpu_locked and lock.state.mem_locked and lock.atexit_registered
        assert lock.state.readback == {"sm_mhz": 1410, "mem_mhz": 2619}
        assert ("set_gpu_locked_clocks", (1410, 1410)) in fake.calls
        assert ("set_memory_locked_clocks", (2619, 2619)) in fake.calls  # highest supported
    assert gpu.sm_mhz == gpu.max_sm_mhz
    assert {"reset_gpu_locked_clocks", "reset_memory_locked_clocks"} <= set(fake.names_called())
    assert not lock.state.gpu_locked and not lock.atexit_registered


def test_explicit_clocks_override_preset():
    fake = FakeNvml([FakeGpu(supported_mem_mhz=[2619, 1593])])
    with _lock(fake, sm_mhz=1200, mem_mhz=1593):
        assert (fake.gpus[0].sm_mhz, fake.gpus[0].mem_mhz) == (1200, 1593)


def test_verify_failure_restores_and_raises():
    fake = FakeNvml([FakeGpu(sm_after_lock=1100)])  # the GPU ignores the lock
    lock = _lock(fake)
    with pytest.raises(ClockLockError, match="did not settle"):
        lock.lock()
    assert "reset_gpu_locked_clocks" in fake.names_called()
    assert "reset_memory_locked_clocks" in fake.names_called()
    assert not lock.state.gpu_locked and not lock.atexit_registered


def test_permission_error_is_clear_and_touches_nothing_else():
    fake = FakeNvml()
    fake.fail["set_gpu_locked_clocks"] = NvmlError("NO_PERMISSION", "Insufficient Permissions")
    with pytest.raises(ClockLockError) as info:
        _lock(fake).lock()
    msg = str(info.value)
    assert "not permitted" in msg and "root" in msg and "GPU 0" in msg and "H100" in msg
    assert "set_memory_locked_clocks" not in fake.names_called()
    assert "reset_gpu_locked_clocks" not in fake.names_called()  # nothing was locked


def test_memory_lock_permission_error_resets_sm_clocks():
    fake = FakeNvml()
    fake.fail["set_memory_locked_clocks"] = NvmlError("NO_PERMISSION")
    with pytest.raises(ClockLockError, match="not permitted"):
        _lock(fake).lock()
    assert "reset_gpu_locked_clocks" in fake.names_called()
    assert fake.gpus[0].sm_mhz == fake.gpus[0].max_sm_mhz


def test_memory_lock_not_supported_is_a_note():
    fake = FakeNvml()
    fake.fail["set_memory_locked_clocks"] = NvmlError("NOT_SUPPORTED")
    with _lock(fake) as lock:
        assert lock.state.gpu_locked and not lock.state.mem_locked
        assert any("not supported" in n for n in lock.state.notes)


def test_restore_on_exception_inside_block():
    fake = FakeNvml()
    with pytest.raises(KeyError):
        with _lock(fake):
            raise KeyError("boom")
    assert fake.gpus[0].sm_mhz == fake.gpus[0].max_sm_mhz
    assert fake.names_called().count("reset_gpu_locked_clocks") == 1


def test_restore_is_idempotent_and_never_raises():
    fake = FakeNvml()
    lock = _lock(fake)
    lock.lock()
    fake.fail["reset_gpu_locked_clocks"] = NvmlError("UNKNOWN", "driver went away")
    problems = lock.restore()
    assert len(problems) == 1 and "SM clocks" in problems[0]
    assert lock.restore() == []
    assert fake.names_called().count("reset_gpu_locked_clocks") == 1


def test_unknown_gpu_without_clocks_refuses_clearly():
    fake = FakeNvml([FakeGpu(name="NVIDIA GeForce RTX 4090")])
    with pytest.raises(ClockLockError, match="no clock preset"):
        _lock(fake).lock()
    assert "set_gpu_locked_clocks" not in fake.names_called()


def test_no_nvml_is_a_clear_error():
    with pytest.raises(ClockLockError, match="cannot reach GPU 0"):
        _lock(FakeNvml(available=False)).lock()


def test_unsupported_preset_memory_clock_uses_nearest():
    fake = FakeNvml([FakeGpu(name="NVIDIA H100 PCIe", supported_mem_mhz=[1600, 1200], max_mem_mhz=1600)])
    with _lock(fake) as lock:
        assert lock.state.mem_mhz == 1600 and lock.state.notes


@pytest.mark.gpu
def test_the_running_gpu_finds_its_lock_clocks_in_its_spec():
    """On a GPU with a spec (H100, H200, B200, A100): the name NVML reports finds the spec, and with it the
    clocks --lock-clocks would set (nothing is locked here)."""
    from solbench.sol.hardware import detect_spec, device_name

    spec = detect_spec(0)
    preset = find_preset(device_name(0), env={})
    assert preset is not None and (preset.match, preset.sm_mhz) == (spec.name, spec.lock_sm_mhz)
