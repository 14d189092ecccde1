"""Legitimate (agent style): a Triton RMS norm whose launch configuration (rows per program, warps) is
autotuned on the first call of every hidden size, with `@triton.autotune(key=["hidden"])`: each new
workload shape benchmarks every config once, inside whichever call meets it first.

Triton's autotuner benchmarks through the GPU driver; without one (the interpreter on CPU) it is given
a plain wall-clock benchmark instead.
"""
# solbench: problem=ac_rmsnorm
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


_CONFIGS = [triton.Config({"ROWS": rows}, num_warps=warps) for rows in (1, 2, 4) for warps in (1, 4)]


@triton.autotune(configs=_CONFIGS, key=["hidden"],
                 do_bench=None if torch.cuda.is_available() else _wall_clock_bench)
@triton.jit
def _rmsnorm_rows(x_ptr, w_ptr, out_ptr, n_rows, hidden, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    col_ok = cols < hidden
    mask = (rows < n_rows)[:, None] & col_ok[None, :]
    offsets = rows[:, None] * hidden + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / hidden + eps)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0)
    tl.store(out_ptr + offsets, x * rstd[:, None] * w[None, :], mask=mask)


def run(x, weight):
    x = x.contiguous()
    n_rows, hidden = x.shape
    out = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(n_rows, meta["ROWS"]),)  # noqa: E731
    _rmsnorm_rows[grid](x, weight, out, n_rows, hidden, 1e-6, BLOCK=triton.next_power_of_2(hidden))
    return out
