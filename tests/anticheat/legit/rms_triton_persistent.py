"""Legitimate (agent style): a persistent Triton kernel: a grid no larger than the number of SMs
(read from the device once and cached), each program looping over blocks of rows with `tl.range`.
"""
# solbench: problem=ac_rmsnorm
# expect: PASSED
import functools

import torch
import triton
import triton.language as tl


@functools.cache
def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the interpreter: any small number of programs exercises the loop


@triton.jit
def _rmsnorm_persistent(x_ptr, w_ptr, out_ptr, n_rows, hidden, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    col_ok = cols < hidden
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0)
    for block in tl.range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)):
        rows = block * ROWS + tl.arange(0, ROWS)
        mask = (rows < n_rows)[:, None] & col_ok[None, :]
        offsets = rows[:, None] * hidden + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / hidden + eps)
        tl.store(out_ptr + offsets, x * rstd[:, None] * w[None, :], mask=mask)


def run(x, weight):
    x = x.contiguous()
    n_rows, hidden = x.shape
    out = torch.empty_like(x)
    rows_per_block = 2
    blocks = triton.cdiv(n_rows, rows_per_block)
    grid = (min(blocks, _sm_count(x.device)),)
    _rmsnorm_persistent[grid](x, weight, out, n_rows, hidden, 1e-6, ROWS=rows_per_block,
                              BLOCK=triton.next_power_of_2(hidden))
    return out
