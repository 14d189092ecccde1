# solbench: problem=layernorm_fp32_h1024
"""Optimised baseline: LayerNorm as one fused Triton kernel, several rows per program.

A 1024-wide float32 row is only 4 KiB, so one row per program leaves each program little work
and many programs to schedule; here each program normalises ROWS rows as a [ROWS, 1024] tile held
in registers. x is read once and y written once; the mean and the centred (two-pass) variance come
from the registers, as numerically careful as the reference's (x - mean)^2.
"""

import torch
import triton
import triton.language as tl

EPS = 1e-5


@triton.jit
def _layer_norm_tile(x_ptr, w_ptr, b_ptr, y_ptr, rows, width, x_stride, y_stride, eps,
                     ROWS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    col = tl.arange(0, BLOCK)
    row_ok = row < rows
    col_ok = col < width
    inside = row_ok[:, None] & col_ok[None, :]
    x = tl.load(x_ptr + row[:, None] * x_stride + col[None, :], mask=inside, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / width
    centred = tl.where(inside, x - mean[:, None], 0.0)
    inv_std = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / width + eps)
    w = tl.load(w_ptr + col, mask=col_ok, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + col, mask=col_ok, other=0.0).to(tl.float32)
    y = centred * inv_std[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + row[:, None] * y_stride + col[None, :], y.to(y_ptr.dtype.element_ty), mask=inside)


@torch.no_grad()
def run(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])
    if flat.stride(-1) != 1:
        flat = flat.contiguous()
    rows, width = flat.shape
    y = torch.empty((rows, width), dtype=x.dtype, device=x.device)
    if rows:
        block = triton.next_power_of_2(width)
        per_program = max(1, min(8, 4096 // block))  # about 16 KiB of fp32 per program: 4 rows of 1024
        warps = max(1, min(8, per_program * block // 1024))
        grid = (triton.cdiv(rows, per_program),)
        _layer_norm_tile[grid](flat, weight.contiguous(), bias.contiguous(), y, rows, width, flat.stride(0),
                               y.stride(0), EPS, ROWS=per_program, BLOCK=block, num_warps=warps)
    return y.reshape(x.shape)
