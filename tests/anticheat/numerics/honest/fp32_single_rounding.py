"""Honest: accumulates in float32 and rounds once at the end (the reference rounds twice: the
normalised row to bf16, then the product with the weight)."""
# solbench: problem=nm_rms_norm
# expect: PASSED
import torch


def run(hidden_states, residual, weight, eps):
    summed = hidden_states.float() + residual.float()
    summed = summed.to(torch.bfloat16).float()  # the residual add's result is a bf16 tensor, as in the model
    mean_square = (summed * summed).sum(dim=-1, keepdim=True) / summed.shape[-1]
    return (summed / torch.sqrt(mean_square + eps) * weight.float()).to(torch.bfloat16)
