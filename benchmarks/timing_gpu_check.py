"""One-shot check of solbench.timing's CUDA paths on a real GPU; prints a table, exits 1 on failure.

    python benchmarks/timing_gpu_check.py [--device cuda:0]

Read-only with respect to the GPU's settings: it never locks or changes clocks.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, no install needed
from solbench.timing.config import TimingConfig  # noqa: E402
from solbench.timing.l2_flush import L2Flusher  # noqa: E402
from solbench.timing.telemetry import Telemetry, is_throttled  # noqa: E402
from solbench.timing.timer import integrity_violations, time_iterations  # noqa: E402

ROWS: list[tuple[str, str, str, bool]] = []


def check(name: str, value: str, expect: str, ok: bool) -> None:
    ROWS.append((name, value, expect, ok))


def guarded(section: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception as exc:  # report and keep going: the lead wants the whole table in one run
        check(section, f"{type(exc).__name__}: {exc}"[:70], "no exception", False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible; nothing to check")
        return 2
    dev = torch.device(args.device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    print(f"device: {props.name}  L2 {props.L2_cache_size / 2**20:.0f} MiB  SMs {props.multi_processor_count}  "
          f"torch {torch.__version__}")
    gpu_cfg = TimingConfig.cuda()

    def integrity_start() -> None:
        v = integrity_violations()
        check("integrity at start", str(v), "[]", v == [])

    def flusher() -> None:
        f = L2Flusher(dev)
        check("L2 flush buffer", f"{f.size_bytes / 2**20:.0f} MiB", f">= 2 x {props.L2_cache_size / 2**20:.0f} MiB",
              f.size_bytes >= 2 * props.L2_cache_size)
        r = time_iterations(lambda i: f.flush(), None, dev, TimingConfig.cuda(l2_flush=False, iters=30, adaptive=False))
        gbs = f.size_bytes / (r.stats.median_ms * 1e-3) / 1e9
        check("L2 flush cost", f"{r.stats.median_ms * 1e3:.1f} us ({gbs:.0f} GB/s write)", "< 10 TB/s, > 50 GB/s",
              50 < gbs < 10_000)

    def telemetry() -> None:
        t = Telemetry(dev.index)
        r = t.read()
        check("NVML reading", "none" if r is None else f"sm {r['sm_mhz']} / mem {r['mem_mhz']} MHz, "
              f"{r['temperature_c']} C, {r['power_w']} W", "a reading", r is not None)
        name = t.name()
        check("NVML device mapping", str(name), props.name, name is not None and name == props.name)

    def matmul() -> None:
        n = 4096
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        r = time_iterations(lambda i: a @ b, None, dev, gpu_cfg)
        tflops = 2 * n**3 / (r.stats.median_ms * 1e-3) / 1e12
        s = r.stats
        check("matmul bf16 4096^3", f"{s.median_ms * 1e3:.1f} us = {tflops:.0f} TFLOP/s, n={s.n}, "
              f"+-{100 * (s.rel_ci_halfwidth or 0):.2f}%", "5..3000 TFLOP/s", 5 < tflops < 3000)
        check("matmul stop / clock warm-up", f"{r.stop_reason} / {r.clock_warmup} ({r.warmup_done} calls, "
              f"{r.warmup_s * 1e3:.0f} ms)", "ci_target / reached|plateau",
              r.stop_reason == "ci_target" and r.clock_warmup in ("reached", "plateau"))
        check("matmul events vs wall", f"{r.events_total_ms:.1f} ms events in {r.wall_s * 1e3:.1f} ms wall",
              "events <= wall, no flag", "events_exceed_wall" not in s.flags and r.events_total_ms <= r.wall_s * 1e3)
        cb, ca = r.clocks_before or {}, r.clocks_after or {}
        check("matmul clocks before/after", f"sm {cb.get('sm_mhz')}->{ca.get('sm_mhz')} MHz, "
              f"{ca.get('temperature_c')} C, {ca.get('power_w')} W, {ca.get('throttle_reasons')}",
              "readings present", bool(cb) and bool(ca))
        check("matmul energy / call", f"{r.energy_mj_per_call} mJ", "a number (if supported)",
              r.energy_mj_per_call is None or r.energy_mj_per_call > 0)
        check("matmul throttled?", str(is_throttled(ca)), "False ideally (info)", True)
        try:
            from triton.testing import do_bench

            ref = do_bench(lambda: a @ b, warmup=100, rep=500, return_mode="median")
            ratio = s.median_ms / ref
            check("matmul vs triton do_bench", f"ratio {ratio:.3f} ({ref * 1e3:.1f} us)", "0.85..1.15",
                  0.85 < ratio < 1.15)
        except ImportError:
            check("matmul vs triton do_bench", "triton missing", "(skipped)", True)

    def copy() -> None:
        nbytes = 256 << 20
        src = torch.empty(nbytes // 4, device=dev, dtype=torch.float32).uniform_()
        dst = torch.empty_like(src)
        r = time_iterations(lambda i: dst.copy_(src), None, dev, gpu_cfg)
        gbs = 2 * nbytes / (r.stats.median_ms * 1e-3) / 1e9
        check("copy 256 MiB", f"{r.stats.median_ms * 1e3:.1f} us = {gbs:.0f} GB/s, n={r.stats.n}, {r.stop_reason}",
              "100..8000 GB/s", 100 < gbs < 8000)

    def l2_effect() -> None:
        # prepare keeps the GPU busy (~50 us, no memory traffic) so that neither arm measures host launch
        # gaps: without it the unflushed arm starts its event on an idle GPU and includes launch latency.
        x = torch.randn(4 << 20, device=dev)  # 16 MiB, fits in L2
        busy = lambda i: torch.cuda._sleep(100_000)  # noqa: E731
        cfg = dict(iters=200, adaptive=False)
        hot = time_iterations(lambda i: x.sum(), busy, dev, TimingConfig.cuda(l2_flush=False, **cfg))
        cold = time_iterations(lambda i: x.sum(), busy, dev, TimingConfig.cuda(l2_flush=True, **cfg))
        ratio = cold.stats.median_ms / hot.stats.median_ms
        check("L2 flush effect (16 MiB sum)", f"hot {hot.stats.median_ms * 1e3:.1f} us, cold "
              f"{cold.stats.median_ms * 1e3:.1f} us, x{ratio:.2f}", "cold > hot (H100: ~x1.5)", ratio > 1.0)

    def prepare_outside() -> None:
        x = torch.randn(1 << 20, device=dev)
        r = time_iterations(lambda i: x.mul_(1.0), lambda i: torch.cuda._sleep(10_000_000), dev,
                            TimingConfig.cuda(iters=20, adaptive=False))
        check("prepare outside window", f"median {r.stats.median_ms * 1e3:.1f} us (prepare ~5 ms GPU)", "< 1 ms",
              r.stats.median_ms < 1.0)

    def adaptive_noisy() -> None:
        rng = random.Random(0)
        cfg = TimingConfig.cuda(max_iters=300, max_time_s=3.0, l2_flush=False)
        t0 = time.perf_counter()
        r = time_iterations(lambda i: torch.cuda._sleep(rng.randint(1_000, 400_000)), None, dev, cfg)
        check("adaptive on noisy kernel", f"{r.stop_reason}, n={r.stats.n}, +-{100 * (r.stats.rel_ci_halfwidth or 0):.1f}%, "
              f"{time.perf_counter() - t0:.2f} s", "max_iters|max_time, wide_ci",
              r.stop_reason in ("max_iters", "max_time") and "wide_ci" in r.stats.flags)

    def tamper() -> None:
        original = torch.cuda.Event.elapsed_time
        torch.cuda.Event.elapsed_time = lambda self, end: 1e-6
        try:
            v = integrity_violations()
            a = torch.randn(2048, 2048, device=dev)
            r = time_iterations(lambda i: a @ a, None, dev, TimingConfig.cuda(iters=20, adaptive=False))
        finally:
            torch.cuda.Event.elapsed_time = original
        check("tamper: patched elapsed_time", f"reported {v}; median {r.stats.median_ms * 1e3:.1f} us",
              "detected, timer unaffected", v == ["torch.cuda.Event.elapsed_time"] and r.stats.median_ms > 0.001)
        check("integrity after restore", str(integrity_violations()), "[]", integrity_violations() == [])

    for name, fn in [("integrity", integrity_start), ("flusher", flusher), ("telemetry", telemetry),
                     ("matmul", matmul), ("copy", copy), ("l2 effect", l2_effect), ("prepare", prepare_outside),
                     ("adaptive", adaptive_noisy), ("tamper", tamper)]:
        guarded(name, fn)

    width = max(len(r[0]) for r in ROWS)
    for name, value, expect, ok in ROWS:
        print(f"{'ok ' if ok else 'BAD'}  {name:<{width}}  {value}   [{expect}]")
    failed = sum(not r[3] for r in ROWS)
    print(f"{len(ROWS) - failed}/{len(ROWS)} checks ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
