"""How many intra-op threads a block's CPU comparison gets: two for a heavy block (a large weight or a
large input) while this process has two and the machine's other work leaves a core idle, else one (`validate` says why one is the rule).

A large block's comparisons are compute-bound operators many times torch's grain size, where a second
thread halves the time: SAM-HQ's vision layer compares in 14.1 s on one thread and 7.5 s on two on an idle
2-core machine (CPU 14.1 and 14.6 s), with the same verdict. Under `--jobs` each process has one thread
(`parallel`), so nothing changes there. Whether a core is idle is measured, not guessed from the load
average (which counts this process's own threads): the machine's busy CPU time, less this process's,
over the time since the previous question (or a 0.2 s sample for the first).
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn

HEAVY_PARAMS = 20_000_000  # a block this large compares in seconds, its operators far past the grain size
HEAVY_INPUT = 1 << 20  # elements of one input: SAM's 64 x 64 x 768 image tokens (7 M parameters per layer)
SAMPLE_S = 0.2

_last: tuple[float, float, float] | None = None  # (monotonic s, machine busy CPU s, this process's CPU s)


def threads_for(module: nn.Module, calls: list) -> int:
    """Two threads for the comparisons of `module` on its recorded `calls`, or one (the module docstring)."""
    largest = max((x.numel() for call in calls for x in call.leaves() if isinstance(x, torch.Tensor)), default=0)
    heavy = largest >= HEAVY_INPUT or sum(p.numel() for p in module.parameters()) >= HEAVY_PARAMS
    if torch.get_num_threads() < 2 or not heavy:
        return 1
    others = others_busy_cores()
    return 2 if others is not None and (os.cpu_count() or 1) - others >= 1.75 else 1


def others_busy_cores() -> float | None:
    """Cores' worth of CPU time other processes used lately; None where /proc/stat cannot be read."""
    global _last
    now = _sample()
    if now is None:
        return None
    if _last is None or now[0] - _last[0] < SAMPLE_S / 2:
        time.sleep(SAMPLE_S)
        _last, now = now, _sample()
        if now is None:
            return None
    before, _last = _last, now
    wall = now[0] - before[0]
    return max(0.0, ((now[1] - before[1]) - (now[2] - before[2])) / wall)


def _sample() -> tuple[float, float, float] | None:
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    busy_s = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # user .. steal; guest is inside user
    own = os.times()
    return time.monotonic(), busy_s, own.user + own.system
