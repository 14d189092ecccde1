# solbench: problem=rmsnorm_h4096
"""Fused RMSNorm in Triton, one program per row (destination-passing: writes `output`).

A 4096-wide bfloat16 row is 8 KiB, so the whole row is loaded once into registers
(8 warps, 16 values per thread), reduced in float32 and written back: one read and one
write of the activations, which is the memory-bound minimum.
"""

import torch
import triton
import triton.language as tl

EPS = 1e-6


@triton.jit
def _rmsnorm_row(x_ptr, w_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, eps,
                 BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x * inv_rms * w
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def run(hidden_states: torch.Tensor, weight: torch.Tensor, output: torch.Tensor) -> None:
    n_rows, n_cols = hidden_states.shape
    x = hidden_states if hidden_states.stride(-1) == 1 else hidden_states.contiguous()
    w = weight.contiguous()
    if n_rows == 0:
        return
    block = triton.next_power_of_2(n_cols)
    num_warps = min(max(block // 512, 1), 16)  # ~16 bf16 per thread: 8 warps for 4096
    _rmsnorm_row[(n_rows,)](x, w, output, x.stride(0), output.stride(0), n_cols, EPS,
                            BLOCK=block, num_warps=num_warps)
