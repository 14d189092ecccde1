"""Does the measured time of a short call depend on the launch hold's length or on the flush kind?

    python benchmarks/experiments/flush_hold_experiment.py [--device cuda]

A write flush leaves the L2 full of dirty lines; if the GPU cleans them while it waits, a longer
hold makes the next call faster, and then the host's speed (which sizes the hold) leaks into the
measurement. For a few short calls this prints the median per (flush mode, minimum hold).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from solbench.timing import call_loop, timer  # noqa: E402
from solbench.timing.config import TimingConfig  # noqa: E402


def calls(dev: torch.device) -> dict:
    x = torch.randn(131, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4096, device=dev, dtype=torch.bfloat16)
    g = torch.randn(16384, device=dev, dtype=torch.bfloat16)
    s = torch.randn(16384, device=dev, dtype=torch.bfloat16)
    a = torch.randn(16, 4096, device=dev, dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)

    def rms(i):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def silu_bwd(i):
        sig = torch.sigmoid(s.float())
        return (g.float() * sig * (1 + s.float() * (1 - sig))).to(g.dtype)

    return {"eager rmsnorm 131x4096": rms, "eager silu bwd 16384": silu_bwd, "gemm 16x4096x4096": lambda i: a @ b.T,
            "scale 32 MiB": lambda i: torch.mul(b, 1.5)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--holds-ms", type=float, nargs="*", default=[0.02, 0.3, 1.0])
    parser.add_argument("--repeats", type=int, default=2, help="each setting timed this many times, interleaved")
    args = parser.parse_args()
    dev = timer.resolve_device(args.device)
    modes = ("write", "read", "write_read")
    print(f"{'call':26} {'flush':11} " + " ".join(f"{f'hold>={h}ms':>14}" for h in args.holds_ms))
    for name, fn in calls(dev).items():
        table = {(m, h): [] for m in modes for h in args.holds_ms}
        for _ in range(args.repeats):
            for mode in modes:
                for hold in args.holds_ms:
                    call_loop.HOLD_MIN_MS = hold
                    cfg = TimingConfig.cuda(l2_flush_mode=mode, iters=100, adaptive=False, max_hold_ms=max(2.0, hold))
                    result = timer.time_iterations(fn, None, dev, cfg)
                    table[(mode, hold)].append(result.stats.median_ms * 1e3)
        for mode in modes:
            cells = " ".join(f"{'/'.join(f'{v:.2f}' for v in table[(mode, h)]):>14}" for h in args.holds_ms)
            print(f"{name:26} {mode:11} {cells}")
    print("(medians in us; one value per repeat)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
