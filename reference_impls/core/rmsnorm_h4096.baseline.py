# solbench: problem=rmsnorm_h4096
"""Optimised baseline: RMSNorm as one fused Triton kernel.

What a kernel engineer would write first and a serving stack ships: each program owns one token
row, loads it once (a 4096-wide bf16 row is 8 KiB, held in registers), reduces the sum of squares
in float32, scales by 1/rms and the weight in float32 and writes bfloat16 once. One read and one
write of the activations, against the five kernels and float32 temporaries of the eager reference.
The arithmetic is the reference's (float32 throughout, one rounding at the end).
"""

import torch
import triton
import triton.language as tl

EPS = 1e-6


@triton.jit
def _rms_norm_rows(x_ptr, w_ptr, y_ptr, x_stride, y_stride, width, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK)
    inside = offsets < width
    x = tl.load(x_ptr + row * x_stride + offsets, mask=inside, other=0.0).to(tl.float32)
    scale = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / width + eps)
    w = tl.load(w_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_stride + offsets, (x * scale * w).to(y_ptr.dtype.element_ty), mask=inside)


@torch.no_grad()
def run(hidden_states: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    x = hidden_states.reshape(-1, hidden_states.shape[-1])
    if x.stride(-1) != 1:
        x = x.contiguous()
    rows, width = x.shape
    y = torch.empty((rows, width), dtype=hidden_states.dtype, device=x.device)
    if rows:
        block = triton.next_power_of_2(width)
        warps = max(1, min(16, block // 256))  # 16 warps x 32 threads x 8 values for 4096
        _rms_norm_rows[(rows,)](x, weight.contiguous(), y, x.stride(0), y.stride(0), width, EPS,
                                BLOCK=block, num_warps=warps)
    return y.reshape(hidden_states.shape)
