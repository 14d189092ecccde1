"""A fake of `solbench.timing.nvml.NvmlBoundary` -- the only test double in tests/timing.

It models just enough of a GPU: current/max clocks, locked clocks that move the current clocks,
readings, and scripted failures (`fail[method_name] = NvmlError(...)`). Every call is logged so
tests can check what was (and was not) done to the "device".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from solbench.timing.nvml import NvmlError


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-1111-2222-3333-444444444444"
    bus_id: str = "00000000:65:00.0"
    sm_mhz: int = 1980
    mem_mhz: int = 2619
    max_sm_mhz: int = 1980
    max_mem_mhz: int = 2619
    supported_mem_mhz: list[int] = field(default_factory=lambda: [2619])
    temperature_c: int = 41
    power_mw: int = 120_000
    energy_mj: int = 1_000_000
    throttle_mask: int = 0
    # what locking does to the readback: None = clocks follow the lock exactly
    sm_after_lock: int | None = None
    mig: bool = False
    capability: tuple[int, int] = (9, 0)


class FakeNvml:
    def __init__(self, gpus: list[FakeGpu] | None = None, *, available: bool = True) -> None:
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.available = available
        self.fail: dict[str, NvmlError] = {}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.initialised = False

    def _log(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if name in self.fail:
            raise self.fail[name]

    def names_called(self) -> list[str]:
        return [c[0] for c in self.calls]

    def init(self) -> None:
        self._log("init")
        if not self.available:
            raise NvmlError("LIBRARY_NOT_FOUND", "no driver")
        self.initialised = True

    def shutdown(self) -> None:
        self._log("shutdown")
        self.initialised = False

    def device_count(self) -> int:
        self._log("device_count")
        return len(self.gpus)

    def handle_by_index(self, index: int) -> FakeGpu:
        self._log("handle_by_index", index)
        if not 0 <= index < len(self.gpus):
            raise NvmlError("INVALID_ARGUMENT", f"index {index}")
        return self.gpus[index]

    def mig_enabled(self, handle: FakeGpu) -> bool:
        self._log("mig_enabled", handle.uuid)
        return handle.mig

    def cuda_capability(self, handle: FakeGpu) -> tuple[int, int]:
        self._log("cuda_capability", handle.uuid)
        return handle.capability

    def handle_by_pci_bus_id(self, bus_id: str) -> FakeGpu:
        self._log("handle_by_pci_bus_id", bus_id)
        for gpu in self.gpus:
            if gpu.bus_id == bus_id:
                return gpu
        raise NvmlError("NOT_FOUND", bus_id)

    def handle_by_uuid(self, uuid: str) -> FakeGpu:
        self._log("handle_by_uuid", uuid)
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise NvmlError("NOT_FOUND", uuid)

    def name(self, handle: FakeGpu) -> str:
        self._log("name", handle.name)
        return handle.name

    def clock_mhz(self, handle: FakeGpu, kind: str) -> int:
        self._log("clock_mhz", kind)
        return handle.mem_mhz if kind == "mem" else handle.sm_mhz

    def max_clock_mhz(self, handle: FakeGpu, kind: str) -> int:
        self._log("max_clock_mhz", kind)
        return handle.max_mem_mhz if kind == "mem" else handle.max_sm_mhz

    def temperature_c(self, handle: FakeGpu) -> int:
        self._log("temperature_c")
        return handle.temperature_c

    def power_mw(self, handle: FakeGpu) -> int:
        self._log("power_mw")
        return handle.power_mw

    def total_energy_mj(self, handle: FakeGpu) -> int:
        self._log("total_energy_mj")
        return handle.energy_mj

    def throttle_reasons(self, handle: FakeGpu) -> int:
        self._log("throttle_reasons")
        return handle.throttle_mask

    def supported_memory_clocks_mhz(self, handle: FakeGpu) -> list[int]:
        self._log("supported_memory_clocks_mhz")
        return list(handle.supported_mem_mhz)

    def set_gpu_locked_clocks(self, handle: FakeGpu, min_mhz: int, max_mhz: int) -> None:
        self._log("set_gpu_locked_clocks", min_mhz, max_mhz)
        handle.sm_mhz = handle.sm_after_lock if handle.sm_after_lock is not None else max_mhz

    def reset_gpu_locked_clocks(self, handle: FakeGpu) -> None:
        self._log("reset_gpu_locked_clocks")
        handle.sm_mhz = handle.max_sm_mhz

    def set_memory_locked_clocks(self, handle: FakeGpu, min_mhz: int, max_mhz: int) -> None:
        self._log("set_memory_locked_clocks", min_mhz, max_mhz)
        handle.mem_mhz = max_mhz

    def reset_memory_locked_clocks(self, handle: FakeGpu) -> None:
        self._log("reset_memory_locked_clocks")
        handle.mem_mhz = handle.max_mem_mhz
