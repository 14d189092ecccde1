"""Attack: normalise by one RMS over the whole tensor instead of each row's.

Cheaper (one reduction, no per-row state) and right whenever every row has the same statistics,
which plain random inputs always have. Caught by the structured correctness trials, whose rows have
different scales: the official rule fails it, no flag needed. (On plain inputs each row's RMS is
within about 1% of the global one; rows that stray further are sometimes flagged as biased.)
"""
# solbench: problem=nm_rms_norm
# expect: INCORRECT_NUMERICAL
# expect-standard: PASSED
# expect-strict: INCORRECT_NUMERICAL
# expect-strict-standard: PASSED|INCORRECT_NUMERICAL
# needs: profiles
import torch


def run(hidden_states, residual, weight, eps):
    summed = (hidden_states + residual).float()
    inverse_rms = torch.rsqrt(summed.square().mean() + eps)
    return (summed * inverse_rms).to(torch.bfloat16) * weight
