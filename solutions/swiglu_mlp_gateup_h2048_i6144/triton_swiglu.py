# solbench: problem=swiglu_mlp_gateup_h2048_i6144
"""SwiGLU MLP: cuBLAS projections around a fused Triton activation (value-returning).

The two projections are tensor-core GEMMs that cuBLAS already runs near peak; what plain
PyTorch wastes is the activation, which it runs as several elementwise kernels with
float32 temporaries. Here silu(gate) * up is one kernel: it reads the [tokens, 2 * I]
gate/up product once and writes the [tokens, I] activation once, in float32 registers.
"""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul(gate_up_ptr, out_ptr, gate_up_row_stride, out_row_stride, inter_size,
                  BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter_size
    base = gate_up_ptr + row * gate_up_row_stride
    gate = tl.load(base + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(base + inter_size + cols, mask=mask, other=0.0).to(tl.float32)
    activation = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + row * out_row_stride + cols, activation.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate_up[:, :I]) * gate_up[:, I:], computed in float32, stored in gate_up's dtype."""
    n_rows, width = gate_up.shape
    inter_size = width // 2
    out = torch.empty((n_rows, inter_size), dtype=gate_up.dtype, device=gate_up.device)
    if n_rows == 0:
        return out
    block = 1024
    grid = (n_rows, triton.cdiv(inter_size, block))
    _silu_and_mul[grid](gate_up, out, gate_up.stride(0), out.stride(0), inter_size, BLOCK=block, num_warps=4)
    return out


@torch.no_grad()
def run(hidden_states: torch.Tensor, gate_up_weight: torch.Tensor, down_weight: torch.Tensor) -> torch.Tensor:
    gate_up = F.linear(hidden_states, gate_up_weight)
    return F.linear(silu_and_mul(gate_up), down_weight)
