"""Honest: the exact answer, computed in float64 and rounded once (as far from the bf16 reference
as an honest kernel can be)."""
# solbench: problem=nm_rms_norm
# expect: PASSED
import torch


def run(hidden_states, residual, weight, eps):
    summed = (hidden_states + residual).double()
    scale = torch.rsqrt(summed.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (summed * scale * weight.double()).to(torch.bfloat16)
