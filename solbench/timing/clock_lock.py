"""`--lock-clocks`: pin SM (and memory) clocks through NVML for repeatable latencies, then restore.

Why: boost clocks move with temperature and power, so the same kernel measures differently from
minute to minute and machine to machine. Locking to a clock the GPU can sustain under full load
removes that drift. Locking needs root; the lock is verified by reading the clocks back and is
always undone (context manager exit, exceptions, and an atexit hook as a last resort -- a SIGKILL
still leaves clocks locked; `nvidia-smi -rgc -rmc` undoes that by hand).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from solbench.sol.hardware import UnknownHardwareError, load_spec
from solbench.timing.nvml import NvmlBoundary, NvmlError
from solbench.timing.telemetry import resolve_handle

ENV_SM_MHZ = "SOLBENCH_LOCK_SM_MHZ"
ENV_MEM_MHZ = "SOLBENCH_LOCK_MEM_MHZ"


@dataclass(frozen=True)
class ClockPreset:
    """Clocks to lock on one GPU: from its hardware spec (`match` names the spec) or from the environment.

    `sm_mhz` is a clock the part sustains under full load without power throttling (below its
    maximum boost); `mem_mhz=None` means "the highest supported memory clock".
    """

    match: str
    sm_mhz: int
    mem_mhz: int | None = None
    note: str = ""


def spec_preset(device_name: str) -> ClockPreset | None:
    """The clocks the GPU's hardware spec gives (`lock_sm_mhz`, `lock_mem_mhz` in `hw_specs/*.json`, found
    by the name NVML reports, as the speed-of-light figures find it); a measured spec without them takes
    its datasheet spec's (`based_on`). None for a GPU without a spec or without clocks in it."""
    try:
        spec = load_spec(device_name)
        if spec.lock_sm_mhz is None and spec.based_on:
            spec = load_spec(spec.based_on)
    except UnknownHardwareError:
        return None
    if spec.lock_sm_mhz is None:
        return None
    return ClockPreset(spec.name, spec.lock_sm_mhz, spec.lock_mem_mhz, f"hardware spec {spec.name}")


def find_preset(device_name: str, env: Mapping[str, str] | None = None) -> ClockPreset | None:
    """The preset for a device name, with $SOLBENCH_LOCK_SM_MHZ / $SOLBENCH_LOCK_MEM_MHZ overriding
    (they also make GPUs without a spec, or without clocks in it, lockable). None when nothing applies."""
    env = os.environ if env is None else env
    preset = spec_preset(device_name)
    sm_env, mem_env = env.get(ENV_SM_MHZ), env.get(ENV_MEM_MHZ)
    if sm_env or mem_env:
        try:
            sm = int(sm_env) if sm_env else (preset.sm_mhz if preset else None)
            mem = int(mem_env) if mem_env else (preset.mem_mhz if preset else None)
        except ValueError:
            raise ClockLockError(f"{ENV_SM_MHZ}/{ENV_MEM_MHZ} must be integers (MHz)") from None
        if sm is None:
            raise ClockLockError(f"{device_name!r} has no preset: set {ENV_SM_MHZ} as well")
        return ClockPreset(device_name, sm, mem, "from environment")
    return preset


class ClockLockError(RuntimeError):
    """Clocks could not be locked (or verified); the message says why and what to do."""


@dataclass
class LockState:
    device: str = ""
    sm_mhz: int | None = None
    mem_mhz: int | None = None
    gpu_locked: bool = False
    mem_locked: bool = False
    readback: dict[str, int | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class ClockLock:
    """Lock one GPU's clocks for the duration of a `with` block.

    `sm_mhz` / `mem_mhz` override the preset. `sleep` exists so tests need not wait for clocks to
    settle. Memory locking that the GPU does not support is skipped (with a note) unless a memory
    clock was asked for explicitly.
    """

    def __init__(self, cuda_index: int = 0, *, sm_mhz: int | None = None, mem_mhz: int | None = None,
                 lock_memory: bool = True, tolerance_mhz: int = 50, settle_s: float = 2.0,
                 nvml: NvmlBoundary | None = None, sleep: Callable[[float], None] = time.sleep,
                 env: Mapping[str, str] | None = None) -> None:
        self.cuda_index = cuda_index
        self.requested_sm_mhz = sm_mhz
        self.requested_mem_mhz = mem_mhz
        self.lock_memory = lock_memory
        self.tolerance_mhz = tolerance_mhz
        self.settle_s = settle_s
        self.nvml = nvml if nvml is not None else NvmlBoundary()
        self._sleep = sleep
        self._env = env
        self._handle: Any = None
        self.state = LockState()
        self.atexit_registered = False

    # --- helpers ---
    def _where(self) -> str:
        return f"GPU {self.cuda_index} ({self.state.device or 'unknown'})"

    def _fail(self, action: str, exc: NvmlError) -> ClockLockError:
        if exc.not_permitted:
            return ClockLockError(
                f"not permitted to {action} on {self._where()}: NVML clock control needs root. Run as root, or "
                f"lock by hand (sudo nvidia-smi -i <id> -lgc {self.state.sm_mhz},{self.state.sm_mhz}) and run "
                f"without --lock-clocks; traces record the clocks either way.")
        if exc.not_supported:
            return ClockLockError(f"{self._where()} does not support {action} ({exc.code}).")
        return ClockLockError(f"could not {action} on {self._where()}: {exc}")

    def _resolve_targets(self) -> tuple[int, int | None]:
        preset = find_preset(self.state.device, self._env)
        sm = self.requested_sm_mhz or (preset.sm_mhz if preset else None)
        if sm is None:
            raise ClockLockError(f"no clock preset for {self.state.device!r}: pass the SM clock explicitly or set "
                                 f"{ENV_SM_MHZ} (or add lock_sm_mhz to its hardware spec: `solbench hw list`)")
        mem = self.requested_mem_mhz or (preset.mem_mhz if preset else None)
        if not self.lock_memory:
            return sm, None
        try:
            supported = sorted(set(self.nvml.supported_memory_clocks_mhz(self._handle)))
        except NvmlError:
            supported = []
        if mem is None and supported:
            mem = supported[-1]
        elif mem is not None and supported and mem not in supported and self.requested_mem_mhz is None:
            nearest = min(supported, key=lambda c: abs(c - mem))
            self.state.notes.append(f"preset memory clock {mem} MHz not supported; using {nearest} MHz")
            mem = nearest
        return sm, mem

    # --- public ---
    def lock(self) -> LockState:
        """Lock, verify, register the atexit restore. On any failure, restore and raise ClockLockError."""
        try:
            self.nvml.init()
            self._handle = resolve_handle(self.nvml, self.cuda_index)
            self.state.device = self.nvml.name(self._handle)
        except NvmlError as exc:
            raise ClockLockError(f"cannot reach GPU {self.cuda_index} through NVML: {exc}") from None
        sm, mem = self._resolve_targets()
        self.state.sm_mhz, self.state.mem_mhz = sm, mem
        try:
            self.nvml.set_gpu_locked_clocks(self._handle, sm, sm)
        except NvmlError as exc:
            raise self._fail(f"lock SM clocks at {sm} MHz", exc) from None
        self.state.gpu_locked = True
        self._register_atexit()
        if mem is not None:
            try:
                self.nvml.set_memory_locked_clocks(self._handle, mem, mem)
                self.state.mem_locked = True
            except NvmlError as exc:
                if exc.not_supported and self.requested_mem_mhz is None:
                    self.state.notes.append(f"memory clock locking not supported ({exc.code}); left as is")
                else:
                    self.restore()
                    raise self._fail(f"lock memory clocks at {mem} MHz", exc) from None
        ok, readback = self.verify()
        self.state.readback = readback
        if not ok:
            self.restore()
            raise ClockLockError(f"clocks on {self._where()} did not settle at SM {sm} / memory {mem} MHz "
                                 f"(read back {readback}, tolerance {self.tolerance_mhz} MHz); clocks restored")
        return self.state

    def verify(self) -> tuple[bool, dict[str, int | None]]:
        """Read clocks back until they are within tolerance of the targets or `settle_s` has passed."""
        deadline = time.monotonic() + self.settle_s
        while True:
            readback = {"sm_mhz": self._read("sm"), "mem_mhz": self._read("mem")}
            ok = self._close(readback["sm_mhz"], self.state.sm_mhz) and (
                not self.state.mem_locked or self._close(readback["mem_mhz"], self.state.mem_mhz))
            if ok or time.monotonic() >= deadline:
                return ok, readback
            self._sleep(0.1)

    def _read(self, kind: str) -> int | None:
        try:
            return self.nvml.clock_mhz(self._handle, kind)
        except NvmlError:
            return None

    def _close(self, value: int | None, target: int | None) -> bool:
        return value is not None and target is not None and abs(value - target) <= self.tolerance_mhz

    def restore(self) -> list[str]:
        """Undo whatever was locked. Never raises (it runs while another error may be propagating);
        returns the problems it met. Safe to call twice."""
        problems = []
        if self.state.mem_locked:
            try:
                self.nvml.reset_memory_locked_clocks(self._handle)
            except NvmlError as exc:
                problems.append(f"reset memory clocks: {exc}")
            self.state.mem_locked = False
        if self.state.gpu_locked:
            try:
                self.nvml.reset_gpu_locked_clocks(self._handle)
            except NvmlError as exc:
                problems.append(f"reset SM clocks: {exc}")
            self.state.gpu_locked = False
        if self.atexit_registered:
            atexit.unregister(self.restore)
            self.atexit_registered = False
        return problems

    def _register_atexit(self) -> None:
        if not self.atexit_registered:
            atexit.register(self.restore)
            self.atexit_registered = True

    def __enter__(self) -> ClockLock:
        self.lock()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()


def lock_device_clocks(devices: list[str], make_lock: Callable[[int], Any] | None = None) -> contextlib.ExitStack:
    """Lock the clocks of every CUDA device in `devices`; the stack restores them on exit.

    A lock that fails (no permission, clocks that do not settle) restores what was locked and
    raises ClockLockError: a run asked to be measured at locked clocks must not silently run without.
    """
    make_lock = make_lock or ClockLock
    stack = contextlib.ExitStack()
    try:
        for device in devices:
            if device.startswith("cuda"):
                stack.enter_context(make_lock(int(device.split(":")[1]) if ":" in device else 0))
    except BaseException:
        stack.close()
        raise
    return stack
