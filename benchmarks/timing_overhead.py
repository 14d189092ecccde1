"""Harness overhead of solbench.timing on whatever device is present.

    python benchmarks/timing_overhead.py [--device cuda|cpu] [--iters N]

For a few workloads, with and without the cache flush, prints the wall time of the timed block, the
sum of the measured per-iteration times, and the difference per iteration: what the protocol
(prepare, flush, event records, batching, syncs) costs on top of the work measured.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, no install needed
from solbench.timing.config import TimingConfig  # noqa: E402
from solbench.timing.timer import time_iterations  # noqa: E402


def workloads(device: torch.device) -> list[tuple[str, Callable[[int], object]]]:
    if device.type == "cuda":
        small = torch.randn(1 << 10, device=device)
        medium = torch.randn(1 << 24, device=device)
        a = torch.randn(2048, 2048, device=device, dtype=torch.bfloat16)
        return [("tiny add (4 KiB)", lambda i: small.add_(1.0)), ("copy-scale 64 MiB", lambda i: medium.mul_(1.0)),
                ("matmul bf16 2048^3", lambda i: a @ a)]

    def spin(ms: float) -> None:
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end:
            pass

    x = torch.randn(1 << 20)
    return [("no-op", lambda i: None), ("spin 0.1 ms", lambda i: spin(0.1)), ("sum 4 MiB", lambda i: x.sum())]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--iters", type=int, default=None, help="fixed iterations (default: the device's config)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}")
    header = f"{'workload':<22} {'flush':<5} {'n':>5} {'median us':>10} {'sum ms':>9} {'wall ms':>9} " \
             f"{'overhead us/iter':>17} {'measured/wall':>13} {'warm-up ms':>10} stop"
    print(header)
    print("-" * len(header))
    for label, run in workloads(device):
        for flush in (False, True):
            overrides = {"l2_flush": flush}
            if args.iters is not None:
                overrides.update(iters=args.iters, max_iters=args.iters, adaptive=False)
            config = TimingConfig.for_device(device, **overrides)
            r = time_iterations(run, None, device, config)
            n = len(r.samples_ms)
            wall_ms = r.wall_s * 1e3
            overhead_us = (wall_ms - r.events_total_ms) / n * 1e3
            print(f"{label:<22} {'yes' if flush else 'no':<5} {n:>5} {r.stats.median_ms * 1e3:>10.2f} "
                  f"{r.events_total_ms:>9.2f} {wall_ms:>9.2f} {overhead_us:>17.2f} "
                  f"{r.events_total_ms / wall_ms:>13.2f} {r.warmup_s * 1e3:>10.1f} {r.stop_reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
