"""Attack: a cheap inverse square root that is 3.4% high on every row.

Inside the workload's 5% relative tolerance everywhere, so the official rule passes it; every
element leans the same way, which the systematic-bias flag reports (and strict mode fails).
"""
# solbench: problem=nm_rms_norm
# expect: PASSED
# expect-flags: systematic_bias
# expect-strict: INCORRECT_NUMERICAL
import torch


def run(hidden_states, residual, weight, eps):
    summed = (hidden_states + residual).float()
    inverse_rms = torch.rsqrt(summed.square().mean(dim=-1, keepdim=True) + eps) * 1.034
    return (summed * inverse_rms).to(torch.bfloat16) * weight
