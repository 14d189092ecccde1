"""Legitimate: a Triton kernel with @triton.autotune over block sizes (Triton's interpreter on CPU, fp32).

Triton's autotuner benchmarks through the GPU driver; without one (the interpreter) it is given a
plain wall-clock benchmark instead.
"""
# solbench: problem=ac_axpy
# expect: PASSED
import time

import torch
import triton
import triton.language as tl


def _wall_clock_bench(kernel_call, quantiles=None, **_):
    start = time.perf_counter()
    kernel_call()
    ms = (time.perf_counter() - start) * 1e3
    return [ms] * len(quantiles) if quantiles else ms


@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"],
                 do_bench=None if torch.cuda.is_available() else _wall_clock_bench)
@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * 2.0 + y, mask=mask)


def run(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    _axpy[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    return out
