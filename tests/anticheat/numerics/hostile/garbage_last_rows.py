"""Attack: skip the last 0.5% of the rows (a grid one tile short) and fill them with 1000.

Under 1% of the elements, so the official matched ratio lets them miss by any amount; the errors
are a thousand times the data (outliers) and the wrong rows are contiguous (concentrated).
"""
# solbench: problem=nm_rms_norm
# expect: PASSED
# expect-flags: outliers concentrated_mismatches
# expect-strict: INCORRECT_NUMERICAL
import torch


def run(hidden_states, residual, weight, eps):
    summed = (hidden_states + residual).float()
    inverse_rms = torch.rsqrt(summed.square().mean(dim=-1, keepdim=True) + eps)
    out = (summed * inverse_rms).to(torch.bfloat16) * weight
    rows = out.shape[-2]
    out[..., rows - rows // 200:, :] = 1000.0
    return out
