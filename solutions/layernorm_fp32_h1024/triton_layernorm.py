# solbench: problem=layernorm_fp32_h1024
"""Fused LayerNorm in Triton, one program per row (value-returning: allocates y).

A 1024-wide float32 row (4 KiB) fits in registers: it is loaded once, the mean and the
centred variance are computed from the registers (two-pass, numerically safer than
E[x^2] - E[x]^2), and y is written once.
"""

import torch
import triton
import triton.language as tl

EPS = 1e-5


@triton.jit
def _layernorm_row(x_ptr, w_ptr, b_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, eps,
                   BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centred = tl.where(mask, x - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(centred * centred, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * y_row_stride + cols, centred * rstd * w + b, mask=mask)


def run(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    x = x if x.stride(-1) == 1 else x.contiguous()
    n_rows, n_cols = x.shape
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0:
        return y
    block = triton.next_power_of_2(n_cols)
    num_warps = min(max(block // 256, 1), 8)  # 4 warps for 1024: 8 floats per thread
    _layernorm_row[(n_rows,)](x, weight.contiguous(), bias.contiguous(), y, x.stride(0), y.stride(0), n_cols,
                              EPS, BLOCK=block, num_warps=num_warps)
    return y
