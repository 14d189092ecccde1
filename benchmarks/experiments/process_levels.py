"""Is a short call's level set per process by where the caching allocator puts its temporaries?

    python benchmarks/experiments/process_levels.py [--processes 6] [--iters 300]

The same eager reference timed in two worker processes sat ~7 % apart, each stable (issue: timing
you can trust). Each child process here times the same calls with fixed inputs at 8 rotating slots,
in alternating blocks of two kinds: plain, with a random-size allocation made before every call
and held across it ("shuffled"), which moves the call's temporaries to a different address each
call, and with new input values every call, drawn into new tensors as the harness does
("fresh_alloc") or into the same ones ("fresh_inplace"), and with the GPU left idle for 1 or 5 ms
before each call's flush ("idle_1ms", "idle_5ms"), as when the host draws inputs slowly, and with the
call replayed from a CUDA graph ("graph": the kernels' launches are uploaded to the device once). If the per-process spread of the plain medians is an address effect, the shuffled medians
agree across processes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SLOTS = 8
KINDS = ("plain", "shuffled", "fresh_alloc", "fresh_inplace", "idle_1ms", "idle_5ms", "graph")


def child(iters: int, blocks: int, flush: bool, kinds: tuple[str, ...]) -> None:
    import torch

    sys.path.insert(0, str(REPO))
    from solbench.timing import timer
    from solbench.timing.config import TimingConfig

    dev = timer.resolve_device("cuda")
    bf16 = torch.bfloat16

    def silu_bwd(g, s):
        sig = torch.sigmoid(s.float())
        return (g.float() * sig * (1 + s.float() * (1 - sig))).to(g.dtype)

    cases = {"eager silu bwd n=16384": ([torch.randn(16384, device=dev, dtype=bf16) for _ in range(2)], silu_bwd),
             "gemm M=1 n4096 k4096": ([torch.randn(1, 4096, device=dev, dtype=bf16),
                                       torch.randn(4096, 4096, device=dev, dtype=bf16)], lambda a, b: a @ b.T)}
    rng = random.Random()
    out = {}
    for name, (source, fn) in cases.items():
        slots = [[torch.empty_like(t) for t in source] for _ in range(SLOTS)]
        for kind in kinds * blocks:
            held: list = []

            def prepare(i, kind=kind, held=held, slots=slots, source=source):
                held.clear()
                if kind == "shuffled":
                    held.append(torch.empty(rng.randrange(1, 4096) * 512, dtype=torch.uint8, device=dev))
                if kind == "fresh_alloc":  # new values in new tensors every call, as the harness draws them
                    source = [torch.randn(t.shape, device=dev, dtype=torch.float32).to(t.dtype) for t in source]
                    held.append(source)
                elif kind == "fresh_inplace":  # new values, no allocation
                    for t in source:
                        t.normal_()
                elif kind.startswith("idle_"):  # the GPU idles while the host prepares (slow input generation)
                    torch.cuda.synchronize()
                    time.sleep(float(kind[5:-2]) / 1e3)
                for dst, src in zip(slots[i % SLOTS], source):
                    dst.copy_(src)

            cfg = TimingConfig.cuda(iters=iters, adaptive=False, l2_flush=flush)
            call = lambda i, fn=fn, slots=slots: fn(*slots[i % SLOTS])  # noqa: E731
            if kind == "graph":  # the same chain replayed from a CUDA graph: no per-kernel launches
                graphs = []
                for k in range(SLOTS):
                    fn(*slots[k])
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        fn(*slots[k])
                    graphs.append(graph)
                call = lambda i, graphs=graphs: graphs[i % SLOTS].replay()  # noqa: E731
            result = timer.time_iterations(call, prepare, dev, cfg)
            out.setdefault(name, {}).setdefault(kind, []).append(result.stats.median_ms * 1e3)
    out["sm_ids"] = first_sm_ids(dev)
    print(json.dumps(out))


def first_sm_ids(dev) -> dict:
    """Which SMs the CTAs of a small grid (32 CTAs, like a 16k-element elementwise kernel) land on,
    over 50 launches after a flush: is the placement of small grids fixed per process?"""
    import torch
    import triton
    import triton.language as tl

    from solbench.timing.timer import flusher_for

    @triton.jit
    def smid(out_ptr, dummy_ptr):
        pid = tl.program_id(0)
        x = tl.load(dummy_ptr + pid)
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)
        tl.store(out_ptr + pid, sm)

    out = torch.empty(50, 32, dtype=torch.int32, device=dev)
    dummy = torch.zeros(32, dtype=torch.int32, device=dev)
    flush = flusher_for(dev).flush
    for k in range(50):
        flush()
        smid[(32,)](out[k], dummy)
    ids = out.cpu()
    return {"cta0": sorted(set(ids[:, 0].tolist())), "all": len(set(ids.flatten().tolist())),
            "min": int(ids.min()), "max": int(ids.max())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--no-flush", action="store_true", help="no cache flush before calls")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.iters, args.blocks, not args.no_flush, tuple(args.kinds))
        return 0
    runs = []
    for _ in range(args.processes):
        done = subprocess.run([sys.executable, __file__, "--child", "--iters", str(args.iters), "--blocks",
                               str(args.blocks), "--kinds", *args.kinds, *(["--no-flush"] if args.no_flush else [])],
                              capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            return 1
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for r in runs:
        print("SMs of a 32-CTA grid:", r.get("sm_ids"), {n: round(statistics.median(v["plain"]), 2)
                                                          for n, v in r.items() if n != "sm_ids" and "plain" in v})
    for name in [n for n in runs[0] if n != "sm_ids"]:
        for kind in runs[0][name]:
            per_process = [statistics.median(r[name][kind]) for r in runs]
            within = max(max(r[name][kind]) / min(r[name][kind]) - 1 for r in runs)
            print(f"{name:24} {kind:9} per process {' '.join(f'{v:6.2f}' for v in per_process)} us | "
                  f"spread across processes {max(per_process) / min(per_process) - 1:6.2%} | "
                  f"worst within a process {within:6.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
