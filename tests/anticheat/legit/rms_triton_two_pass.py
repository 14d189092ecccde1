"""Legitimate (agent style): two kernels for wide rows: the first reduces each row's sum of squares over
column chunks into a scratch buffer of reciprocal RMS values (allocated on every call), the second
normalises 2-D tiles (row, column chunk) with it. Destination-passing style.
"""
# solbench: problem=ac_rmsnorm
# expect: PASSED
import torch
import triton
import triton.language as tl

CHUNK = 64


@triton.jit
def _row_rstd(x_ptr, rstd_ptr, hidden, eps, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, hidden, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        x = tl.load(x_ptr + row * hidden + cols, mask=cols < hidden, other=0.0)
        acc += x * x
    tl.store(rstd_ptr + row, tl.rsqrt(tl.sum(acc, axis=0) / hidden + eps))


@triton.jit
def _normalise(x_ptr, w_ptr, rstd_ptr, out_ptr, hidden, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * hidden + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = tl.load(rstd_ptr + row)
    tl.store(out_ptr + row * hidden + cols, x * rstd * w, mask=mask)


def run(x, weight, out):
    x = x.contiguous()
    n_rows, hidden = x.shape
    rstd = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    _row_rstd[(n_rows,)](x, rstd, hidden, 1e-6, CHUNK=CHUNK)
    _normalise[(n_rows, triton.cdiv(hidden, CHUNK))](x, weight, rstd, out, hidden, CHUNK=CHUNK)
