"""Do short calls run at a speed fixed by where their inputs sit in memory?

    python benchmarks/experiments/layout_levels.py [--layouts 6] [--iters 200]

Within one process, the harness's timed blocks of a ~15-20 us call settled at one of two levels
about 5 % apart, block by block. Each block allocates new argument slots, so this separates the
two candidate causes: for each of several slot layouts (8 slots, allocated after a random-size
pad), the same slots are timed twice in a row, and the first layout again at the end. A level
that repeats for a layout and changes between layouts is set by the addresses; one that changes
between repeats of the same layout is set by time. Per-slot medians show whether it is per slot.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from solbench.timing import timer  # noqa: E402
from solbench.timing.config import TimingConfig  # noqa: E402

SLOTS = 8


def cases(dev: torch.device) -> dict:
    bf16 = torch.bfloat16

    def silu_bwd(g, s):
        sig = torch.sigmoid(s.float())
        return (g.float() * sig * (1 + s.float() * (1 - sig))).to(g.dtype)

    return {
        "gemm M=128 n4096 k4096": ([torch.randn(128, 4096, device=dev, dtype=bf16),
                                    torch.randn(4096, 4096, device=dev, dtype=bf16)], lambda a, b: a @ b.T),
        "gemm M=1 n4096 k4096": ([torch.randn(1, 4096, device=dev, dtype=bf16),
                                  torch.randn(4096, 4096, device=dev, dtype=bf16)], lambda a, b: a @ b.T),
        "eager silu bwd n=16384": ([torch.randn(16384, device=dev, dtype=bf16),
                                    torch.randn(16384, device=dev, dtype=bf16)], silu_bwd),
    }


def time_slots(fn, source: list, slots: list, dev, iters: int) -> tuple[float, list[float]]:
    def prepare(i):
        for dst, src in zip(slots[i % SLOTS], source):
            dst.copy_(src)

    cfg = TimingConfig.cuda(iters=iters, adaptive=False)
    result = timer.time_iterations(lambda i: fn(*slots[i % SLOTS]), prepare, dev, cfg)
    per_slot: list[list[float]] = [[] for _ in range(SLOTS)]
    for j, t in enumerate(result.samples_ms):
        per_slot[(result.warmup_done + j) % SLOTS].append(t)
    return result.stats.median_ms * 1e3, [statistics.median(s) * 1e3 for s in per_slot if s]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", type=int, default=6)
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    dev = timer.resolve_device("cuda")
    rng = random.Random(0)
    for name, (source, fn) in cases(dev).items():
        layouts, pads = [], []
        for _ in range(args.layouts):
            pads.append(torch.empty(rng.randrange(1, 64) << 20, dtype=torch.uint8, device=dev))
            layouts.append([[torch.empty_like(t) for t in source] for _ in range(SLOTS)])
        print(f"== {name}")
        for k, slots in enumerate(layouts):
            a, per_a = time_slots(fn, source, slots, dev, args.iters)
            b, per_b = time_slots(fn, source, slots, dev, args.iters)
            ptrs = " ".join(f"{slots[s][-1].data_ptr() % (2 << 20) >> 10:4d}" for s in range(SLOTS))
            print(f"layout {k}: {a:7.2f} {b:7.2f} us | per slot {' '.join(f'{v:6.2f}' for v in per_a)} "
                  f"| last input at KiB mod 2 MiB: {ptrs}", flush=True)
        again, per = time_slots(fn, source, layouts[0], dev, args.iters)
        print(f"layout 0 again: {again:7.2f} us | per slot {' '.join(f'{v:6.2f}' for v in per)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
