"""Cache flushing between timed calls, so every call starts with a cold last-level cache.

Without it, a kernel whose inputs fit in L2 (50 MiB on an H100) reads them from cache on every
iteration after the first and looks faster than it will in a model. The flush sweeps a buffer of at
least twice the cache size. On CUDA the default sweep reads it: all earlier lines are evicted and the
cache is left holding clean lines, so the next call does not pay for writing back the flush's own
dirty data (a write sweep costs a 32 MiB-reading kernel about 5 us on an H100; docs/timing.md). On
CPU the sweep is a memset whose value alternates so no layer can skip a "same value" store.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

SYSFS_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
CPU_FALLBACK_BYTES = 64 << 20  # when sysfs says nothing (containers, non-Linux)
# CPU: a cheap sweep (a few ms) that clears the private caches and more; a shared server L3 of hundreds of
# MiB is not ours to clear, and sweeping 512 MiB cost ~100 ms per call on a loaded 2-core VM (docs/timing.md)
CPU_CAP_BYTES = 32 << 20
CUDA_FALLBACK_L2_BYTES = 128 << 20  # if the driver does not report an L2 size
MIN_FLUSH_BYTES = 1 << 20
FLUSH_MODES = ("write", "read", "write_read")  # CUDA: fill, sum, or both (CPU always writes)

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_cache_size(text: str) -> int | None:
    """'32768K' -> 33554432; None when unreadable."""
    m = _SIZE_RE.match(text)
    if not m:
        return None
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def cpu_cache_bytes(cache_dir: Path = SYSFS_CACHE_DIR) -> int | None:
    """Largest cache level's size seen by cpu0 (usually the L3), or None."""
    sizes = []
    for size_file in sorted(cache_dir.glob("index*/size")):
        try:
            size = parse_cache_size(size_file.read_text())
        except OSError:
            size = None
        if size:
            sizes.append(size)
    return max(sizes) if sizes else None


def cpu_flush_bytes(cache_dir: Path = SYSFS_CACHE_DIR) -> int:
    """2x the last-level cache, capped; a fixed fallback when the size is unknown."""
    llc = cpu_cache_bytes(cache_dir)
    if llc is None:
        return CPU_FALLBACK_BYTES
    return max(MIN_FLUSH_BYTES, min(2 * llc, CPU_CAP_BYTES))


def cuda_flush_bytes(device: torch.device) -> int:
    """2x the device's L2 size as reported by the driver."""
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or CUDA_FALLBACK_L2_BYTES
    return max(MIN_FLUSH_BYTES, 2 * int(l2))


def read_sweep(buffer: torch.Tensor, sink: torch.Tensor) -> None:
    """Read every element of `buffer` (a sum into the 0-d int64 `sink`: no allocation per flush)."""
    torch.sum(buffer, dim=0, out=sink)


class L2Flusher:
    """Owns one pre-allocated buffer; `flush()` overwrites all of it (no allocation per call).

    On CUDA the write is a fill kernel enqueued on the current stream, so it is ordered before the next
    timed call without a host sync. On CPU it is a synchronous memset of a numpy buffer.
    """

    def __init__(self, device: torch.device | str | int = "cpu", *, size_bytes: int | None = None,
                 cache_dir: Path = SYSFS_CACHE_DIR, mode: str = "read") -> None:
        if mode not in FLUSH_MODES:
            raise ValueError(f"flush mode must be one of {FLUSH_MODES}, not {mode!r}")
        self.mode = mode
        if isinstance(device, int):
            device = torch.device("cuda", device)
        self.device = torch.device(device)
        if self.device.type == "cuda":
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            default = cuda_flush_bytes(self.device)
        else:
            default = cpu_flush_bytes(cache_dir)
        self.size_bytes = int(size_bytes if size_bytes is not None else default)
        if self.size_bytes < 1:
            raise ValueError("flush buffer must be at least one byte")
        if self.device.type == "cuda":
            # int32 elements: whole-word stores; a tail of < 4 bytes is irrelevant.
            self._buffer = torch.zeros(max(1, self.size_bytes // 4), dtype=torch.int32, device=self.device)
            self._sink = torch.zeros((), dtype=torch.int64, device=self.device)
        else:
            # numpy's fill is a plain memset; torch's CPU fill_ was 5x slower on a 2-core machine.
            self._buffer = np.empty(self.size_bytes, dtype=np.uint8)
            self._buffer.fill(0)  # fault the pages in now, not during the first flush
        self.flush_count = 0

    def flush(self) -> None:
        """Sweep the whole buffer: on CUDA as `mode` says (a write uses a value that differs from the
        previous flush); on CPU always a write."""
        self.flush_count += 1
        if self.device.type == "cuda":
            if self.mode in ("write", "write_read"):
                self._buffer.fill_(self.flush_count & 0xFF)
            if self.mode in ("read", "write_read"):
                read_sweep(self._buffer, self._sink)
        else:
            self._buffer.fill(self.flush_count & 0xFF)

    def __repr__(self) -> str:
        return f"L2Flusher(device={self.device}, size_bytes={self.size_bytes})"
