"""Attack: the 3.4% error of `systematic_bias`, with its sign alternating from row to row.

The mean over the whole output is about zero, so a global bias statistic misses it; each row on its
own still leans one way, which the per-row part of the systematic-bias flag reports.
"""
# solbench: problem=nm_rms_norm
# expect: PASSED
# expect-flags: systematic_bias
# expect-strict: INCORRECT_NUMERICAL
import torch


def run(hidden_states, residual, weight, eps):
    summed = (hidden_states + residual).float()
    inverse_rms = torch.rsqrt(summed.square().mean(dim=-1, keepdim=True) + eps)
    sign = 1 - 2 * (torch.arange(summed.shape[-2], device=summed.device) % 2)
    inverse_rms = inverse_rms * (1 + 0.034 * sign.to(summed.dtype))[:, None]
    return (summed * inverse_rms).to(torch.bfloat16) * weight
