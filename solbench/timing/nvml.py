"""The one boundary between solbench and NVML (nvidia-ml-py).

Telemetry and clock locking call only the methods of `NvmlBoundary`; tests substitute a fake with
the same methods. Every NVML failure surfaces as `NvmlError` with the NVML error name, so callers
can tell "not permitted" from "not supported" without importing pynvml.
"""

from __future__ import annotations

import threading
from typing import Any

CLOCK_KINDS = ("sm", "mem", "graphics")


class NvmlError(RuntimeError):
    """An NVML call failed; `code` is the NVML error name, e.g. "NO_PERMISSION"."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"NVML {code}: {message}" if message else f"NVML {code}")
        self.code = code

    @property
    def not_permitted(self) -> bool:
        return self.code == "NO_PERMISSION"

    @property
    def not_supported(self) -> bool:
        return self.code in ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND")


def _error_code(pynvml: Any, exc: Exception) -> str:
    value = getattr(exc, "value", None)
    for name in dir(pynvml):
        if name.startswith("NVML_ERROR_") and getattr(pynvml, name) == value:
            return name[len("NVML_ERROR_"):]
    return type(exc).__name__


class NvmlBoundary:
    """Thin wrapper over pynvml; handles are opaque objects passed back in unchanged."""

    def __init__(self) -> None:
        self._pynvml: Any = None
        self._lock = threading.Lock()
        self._initialised = False

    def _call(self, fn_name: str, *args: Any) -> Any:
        nv = self._pynvml
        fn = getattr(nv, fn_name, None)
        if fn is None:
            raise NvmlError("FUNCTION_NOT_FOUND", f"pynvml has no {fn_name}")
        try:
            return fn(*args)
        except nv.NVMLError as exc:
            raise NvmlError(_error_code(nv, exc), f"{fn_name}: {exc}") from None

    def init(self) -> None:
        """Load and initialise NVML; raises NvmlError("LIBRARY_NOT_FOUND"/...) when unavailable."""
        with self._lock:
            if self._initialised:
                return
            try:
                import pynvml
            except ImportError as exc:
                raise NvmlError("LIBRARY_NOT_FOUND", f"nvidia-ml-py not installed ({exc})") from None
            self._pynvml = pynvml
            self._call("nvmlInit")
            self._initialised = True

    def shutdown(self) -> None:
        with self._lock:
            if self._initialised:
                self._initialised = False
                try:
                    self._call("nvmlShutdown")
                except NvmlError:
                    pass

    # --- discovery ---
    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def handle_by_index(self, index: int) -> Any:
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def handle_by_pci_bus_id(self, bus_id: str) -> Any:
        return self._call("nvmlDeviceGetHandleByPciBusId", bus_id)

    def handle_by_uuid(self, uuid: str) -> Any:
        return self._call("nvmlDeviceGetHandleByUUID", uuid)

    def name(self, handle: Any) -> str:
        name = self._call("nvmlDeviceGetName", handle)
        return name.decode() if isinstance(name, bytes) else str(name)

    def cuda_capability(self, handle: Any) -> tuple[int, int]:
        major, minor = self._call("nvmlDeviceGetCudaComputeCapability", handle)
        return int(major), int(minor)

    def mig_enabled(self, handle: Any) -> bool:
        """Whether the GPU is in MIG mode (CUDA then enumerates its instances); False where MIG does not exist."""
        try:
            current, _pending = self._call("nvmlDeviceGetMigMode", handle)
        except NvmlError as exc:
            if exc.not_supported:
                return False
            raise
        return bool(current)

    # --- readings ---
    def _clock_type(self, kind: str) -> int:
        nv = self._pynvml
        return {"sm": nv.NVML_CLOCK_SM, "mem": nv.NVML_CLOCK_MEM, "graphics": nv.NVML_CLOCK_GRAPHICS}[kind]

    def clock_mhz(self, handle: Any, kind: str) -> int:
        return int(self._call("nvmlDeviceGetClockInfo", handle, self._clock_type(kind)))

    def max_clock_mhz(self, handle: Any, kind: str) -> int:
        return int(self._call("nvmlDeviceGetMaxClockInfo", handle, self._clock_type(kind)))

    def temperature_c(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetTemperature", handle, self._pynvml.NVML_TEMPERATURE_GPU))

    def power_mw(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetPowerUsage", handle))

    def total_energy_mj(self, handle: Any) -> int:
        """Energy since the driver was loaded, in millijoules (Volta and newer)."""
        return int(self._call("nvmlDeviceGetTotalEnergyConsumption", handle))

    def throttle_reasons(self, handle: Any) -> int:
        """Bitmask of why clocks are below maximum (NVML's "clocks event reasons")."""
        if hasattr(self._pynvml, "nvmlDeviceGetCurrentClocksEventReasons"):
            return int(self._call("nvmlDeviceGetCurrentClocksEventReasons", handle))
        return int(self._call("nvmlDeviceGetCurrentClocksThrottleReasons", handle))

    def supported_memory_clocks_mhz(self, handle: Any) -> list[int]:
        return [int(c) for c in self._call("nvmlDeviceGetSupportedMemoryClocks", handle)]

    # --- clock control (needs root or an admin-enabled driver setting) ---
    def set_gpu_locked_clocks(self, handle: Any, min_mhz: int, max_mhz: int) -> None:
        self._call("nvmlDeviceSetGpuLockedClocks", handle, min_mhz, max_mhz)

    def reset_gpu_locked_clocks(self, handle: Any) -> None:
        self._call("nvmlDeviceResetGpuLockedClocks", handle)

    def set_memory_locked_clocks(self, handle: Any, min_mhz: int, max_mhz: int) -> None:
        self._call("nvmlDeviceSetMemoryLockedClocks", handle, min_mhz, max_mhz)

    def reset_memory_locked_clocks(self, handle: Any) -> None:
        self._call("nvmlDeviceResetMemoryLockedClocks", handle)
