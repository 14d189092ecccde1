"""Honest: the sum of squares as a kernel computes it, in four partial sums per row (another
reduction order), with the row statistic kept in bf16 registers before use."""
# solbench: problem=nm_rms_norm
# expect: PASSED
import torch


def run(hidden_states, residual, weight, eps):
    summed = (hidden_states + residual).float()
    parts = summed.reshape(*summed.shape[:-1], 4, summed.shape[-1] // 4)
    mean_square = parts.square().sum(dim=-1).sum(dim=-1, keepdim=True) / summed.shape[-1]
    inverse_rms = torch.rsqrt(mean_square + eps).to(torch.bfloat16).float()
    return (summed * inverse_rms * weight.float()).to(torch.bfloat16)
