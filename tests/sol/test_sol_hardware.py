"""Hardware specs: lookup by name or alias, unknown GPUs, spec folders."""

from __future__ import annotations

import json

import pytest

from solbench.sol import hardware
from solbench.sol.hardware import UnknownHardwareError, list_specs, load_spec
from tests.timing.fake_nvml import FakeGpu, FakeNvml

REQUIRED = {"B200", "B200_BOOST", "GB200", "H100_SXM", "H200_SXM", "H100_PCIE", "A100_SXM"}


def test_required_specs_present_with_sources():
    specs = {s.name: s for s in list_specs()}
    assert REQUIRED <= set(specs)
    for spec in specs.values():
        assert spec.sources, spec.name
        assert spec.hbm_bandwidth_gbps > 0 and spec.bf16_tflops > 0 and spec.fp32_simt_tflops > 0


@pytest.mark.parametrize("name,expected", [
    ("H100", "H100_SXM"), ("h100_sxm", "H100_SXM"), ("NVIDIA H100 80GB HBM3", "H100_SXM"),
    ("NVIDIA H100 PCIe", "H100_PCIE"), ("NVIDIA B200", "B200"), ("b200-boost", "B200_BOOST"),
    ("NVIDIA H200", "H200_SXM"), ("NVIDIA A100-SXM4-80GB", "A100_SXM"),
])
def test_aliases(name, expected):
    assert load_spec(name).name == expected


def test_unknown_gpu_lists_known_specs():
    with pytest.raises(UnknownHardwareError) as info:
        load_spec("NVIDIA GeForce RTX 4090")
    assert "H100_SXM" in str(info.value) and "--hw" in str(info.value)


def test_detect_unknown_device_is_an_error_not_a_guess(monkeypatch):
    monkeypatch.setattr(hardware, "device_name", lambda index=0: "NVIDIA Mystery X1")
    with pytest.raises(UnknownHardwareError, match="Mystery"):
        hardware.detect_spec()
    monkeypatch.setattr(hardware, "device_name", lambda index=0: "NVIDIA H100 80GB HBM3")
    assert hardware.detect_spec().name == "H100_SXM"


def test_b200_locked_convention_figures():
    b200 = load_spec("B200")
    assert b200.clocks_locked and b200.reject_with == "B200_BOOST"
    assert b200.bf16_tflops == pytest.approx(2250 * 1.5 / 1.8634, rel=1e-3)
    assert b200.matmul_tflops("float32") == b200.tf32_tflops
    assert b200.matmul_tflops("float8_e5m2") == b200.fp8_tflops
    assert b200.matmul_tflops("float4_e2m1fn_x2") == b200.fp4_tflops
    assert load_spec("H100").matmul_tflops("float4_e2m1fn_x2") == load_spec("H100").fp8_tflops  # no fp4 unit


def test_env_folder_adds_specs(tmp_path, monkeypatch):
    spec = load_spec("H100_SXM").to_dict()
    spec.update(name="MY_GPU", aliases=["Acme One"], measured=True)
    (tmp_path / "mine.json").write_text(json.dumps(spec))
    monkeypatch.setenv(hardware.ENV_VAR, str(tmp_path))
    assert load_spec("acme one").name == "MY_GPU" and load_spec("MY_GPU").measured


def test_one_copy_of_the_specs():
    """Adding a GPU is one JSON file in hw_specs/: the package's folder is a link to it, not a copy."""
    assert hardware.PACKAGE_SPECS_DIR.resolve() == hardware.REPO_SPECS_DIR.resolve()
    assert {p.name for p in hardware.PACKAGE_SPECS_DIR.glob("*.json")} == {p.name for p in hardware.REPO_SPECS_DIR.glob("*.json")}


@pytest.mark.gpu
def test_calibrate_on_gpu():
    from solbench.sol.calibrate import measure

    spec = measure(quick=True)
    assert spec.measured and spec.hbm_bandwidth_gbps > 100 and spec.bf16_tflops > 10
    if spec.based_on:
        sheet = load_spec(spec.based_on)
        assert spec.hbm_bandwidth_gbps < sheet.hbm_bandwidth_gbps * 1.1
        assert spec.bf16_tflops < sheet.bf16_tflops * 1.1


def two_gpus() -> FakeNvml:
    """NVML at its boundary: an H100 (index 0) and an H200 (index 1, UUID GPU-b)."""
    return FakeNvml([FakeGpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-a"),
                     FakeGpu(name="NVIDIA H200", uuid="GPU-b", bus_id="00000000:66:00.0")])


@pytest.mark.parametrize(("visible", "index", "expected"), [
    (None, 1, "NVIDIA H200"), ("1", 0, "NVIDIA H200"), ("1,0", 1, "NVIDIA H100 80GB HBM3"),
    ("GPU-b", 0, "NVIDIA H200"),
])
def test_the_device_name_is_the_gpu_this_process_sees_as_that_index(visible, index, expected, monkeypatch):
    """NVML numbers GPUs physically; a process given GPU 1 (a Ray actor) sees it as its CUDA device 0."""
    fake = two_gpus()
    monkeypatch.setattr(hardware, "NvmlBoundary", lambda: fake)
    hardware._device_name.cache_clear()
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    try:
        assert hardware.device_name(index) == expected
        assert hardware.device_name(index) == expected
        assert fake.names_called().count("init") == 1  # asked once per process and device, not once per workload
    finally:
        hardware._device_name.cache_clear()


@pytest.mark.gpu
def test_the_nvml_name_of_each_visible_gpu_is_the_one_cuda_reports():
    import torch

    hardware._device_name.cache_clear()
    for index in range(torch.cuda.device_count()):
        assert hardware.device_name(index) == torch.cuda.get_device_name(index)
    assert hardware.detect_spec(0).name
