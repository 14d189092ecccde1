"""GPU clocks, temperature, power, throttle reasons and energy through NVML.

Why: a latency means little without the clock it ran at. Traces record a reading before and after
each timed block, flag throttling, and derive energy per call. Everything degrades to None / empty
when NVML or a GPU is absent, so CPU-only machines run the same code.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from solbench.timing.nvml import NvmlBoundary, NvmlError

# NVML "clocks event reasons" (formerly "throttle reasons") bits, decoded to stable names.
THROTTLE_REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the clock was pulled below what the benchmark asked for by heat or power trouble.
SLOWDOWN_REASONS = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                              "hw_power_brake_slowdown"})
FLAG_THROTTLED = "throttled"


def decode_throttle_reasons(mask: int) -> list[str]:
    """Bitmask -> names, lowest bit first; unknown bits become "bit_0x...."."""
    names = []
    bit = 1
    while mask and bit <= mask:
        if mask & bit:
            names.append(THROTTLE_REASON_BITS.get(bit, f"bit_{bit:#x}"))
        bit <<= 1
    return names


def is_throttled(reading: Mapping[str, Any] | None, *, include_power_cap: bool = False) -> bool:
    """True when a reading shows thermal / hardware / power-brake slowdown (optionally power cap).

    The software power cap is excluded by default: unlocked GPUs under heavy load sit on it all the
    time, which is the normal operating point rather than a fault.
    """
    if not reading:
        return False
    reasons = set(reading.get("throttle_reasons") or ())
    bad = SLOWDOWN_REASONS | ({"sw_power_cap"} if include_power_cap else set())
    return bool(reasons & bad)


def energy_per_call_mj(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
                       calls: int) -> float | None:
    """Energy counter delta over a block divided by the calls in it, in mJ; None when unsupported,
    when the counter did not move (too short a block for its update rate) or went backwards."""
    if not before or not after or calls <= 0:
        return None
    e0, e1 = before.get("energy_mj"), after.get("energy_mj")
    if e0 is None or e1 is None or e1 <= e0:
        return None
    return (e1 - e0) / calls


def _torch_cuda_ids(cuda_index: int) -> tuple[str | None, str | None]:
    """(NVML-style UUID, PCI bus id) of a CUDA ordinal, only if this process already initialised
    CUDA through torch: telemetry must never be what initialises CUDA (e.g. in the orchestrator)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None, None
    try:
        props = torch.cuda.get_device_properties(cuda_index)
    except Exception:  # any failure just means "no ids"
        return None, None
    uuid = getattr(props, "uuid", None)
    uuid_str = f"GPU-{uuid}" if uuid is not None and not str(uuid).startswith(("GPU-", "MIG-")) else None
    bus = getattr(props, "pci_bus_id", None)
    bus_str = None
    if bus is not None:
        bus_str = f"{getattr(props, 'pci_domain_id', 0):08X}:{bus:02X}:{getattr(props, 'pci_device_id', 0):02X}.0"
    return uuid_str, bus_str


def resolve_handle(nvml: NvmlBoundary, cuda_index: int) -> Any:
    """NVML handle for a CUDA ordinal, honouring CUDA_VISIBLE_DEVICES.

    Order of trust: the PCI bus id / UUID torch reports for the ordinal; else the ordinal's entry in
    CUDA_VISIBLE_DEVICES (a UUID, or an index in NVML's PCI order); else the ordinal itself.
    """
    uuid, bus_id = _torch_cuda_ids(cuda_index)
    for lookup, key in ((nvml.handle_by_pci_bus_id, bus_id), (nvml.handle_by_uuid, uuid)):
        if key:
            try:
                return lookup(key)
            except NvmlError:
                pass
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if cuda_index >= len(entries):
            raise NvmlError("NOT_FOUND", f"CUDA device {cuda_index} not in CUDA_VISIBLE_DEVICES={visible!r}")
        entry = entries[cuda_index]
        if entry.startswith("GPU-"):
            return nvml.handle_by_uuid(entry)
        if entry.isdigit():
            return nvml.handle_by_index(int(entry))
        raise NvmlError("NOT_FOUND", f"cannot map CUDA_VISIBLE_DEVICES entry {entry!r} (MIG?) to NVML")
    return nvml.handle_by_index(cuda_index)


class Telemetry:
    """Readings for one CUDA device. NVML is opened lazily on first use; failures are remembered and
    every reading is then None, so callers need no special case for CPU machines."""

    def __init__(self, cuda_index: int = 0, nvml: NvmlBoundary | None = None) -> None:
        self.cuda_index = cuda_index
        self.nvml = nvml if nvml is not None else NvmlBoundary()
        self._handle: Any = None
        self._opened = False
        self.error: str | None = None
        self._max_sm_mhz: int | None = None

    def _open(self) -> Any:
        if not self._opened:
            self._opened = True
            try:
                self.nvml.init()
                self._handle = resolve_handle(self.nvml, self.cuda_index)
            except NvmlError as exc:
                self.error = str(exc)
                self._handle = None
        return self._handle

    @property
    def available(self) -> bool:
        return self._open() is not None

    def _safe(self, fn, *args) -> Any:
        handle = self._open()
        if handle is None:
            return None
        try:
            return fn(handle, *args)
        except NvmlError:
            return None

    def name(self) -> str | None:
        return self._safe(self.nvml.name)

    def sm_clock_mhz(self) -> int | None:
        return self._safe(self.nvml.clock_mhz, "sm")

    def max_sm_clock_mhz(self) -> int | None:
        """The board's maximum SM clock: fixed for the device, so read once (each timed block asks twice)."""
        if self._max_sm_mhz is None:
            self._max_sm_mhz = self._safe(self.nvml.max_clock_mhz, "sm")
        return self._max_sm_mhz

    def energy_mj(self) -> int | None:
        return self._safe(self.nvml.total_energy_mj)

    def read(self) -> dict[str, Any] | None:
        """One snapshot as a JSON-ready dict, or None without NVML. Fields NVML does not support on
        this device are None."""
        if self._open() is None:
            return None
        mask = self._safe(self.nvml.throttle_reasons)
        power_mw = self._safe(self.nvml.power_mw)
        return {
            "sm_mhz": self.sm_clock_mhz(),
            "mem_mhz": self._safe(self.nvml.clock_mhz, "mem"),
            "max_sm_mhz": self.max_sm_clock_mhz(),
            "temperature_c": self._safe(self.nvml.temperature_c),
            "power_w": power_mw / 1000.0 if power_mw is not None else None,
            "throttle_mask": mask,
            "throttle_reasons": decode_throttle_reasons(mask) if mask is not None else [],
            "energy_mj": self.energy_mj(),
            "time_s": time.time(),
        }


_CACHE: dict[int, Telemetry] = {}


def telemetry_for(cuda_index: int) -> Telemetry:
    """One Telemetry per device per process (NVML initialised once)."""
    if cuda_index not in _CACHE:
        _CACHE[cuda_index] = Telemetry(cuda_index)
    return _CACHE[cuda_index]


def read_clocks(cuda_index: int = 0) -> dict[str, Any] | None:
    """A snapshot for the device, or None where NVML / the GPU is absent."""
    return telemetry_for(cuda_index).read()
