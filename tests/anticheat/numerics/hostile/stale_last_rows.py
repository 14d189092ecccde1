"""Attack: skip the last 0.5% of the rows and leave stale but plausible values there (row 0's).

No element is far off (the values have the data's magnitude), but the mismatches fill whole
consecutive rows, which honest rounding never does: concentrated mismatches.
"""
# solbench: problem=nm_rms_norm
# expect: PASSED
# expect-flags: concentrated_mismatches
# expect-strict: INCORRECT_NUMERICAL
import torch


def run(hidden_states, residual, weight, eps):
    summed = (hidden_states + residual).float()
    inverse_rms = torch.rsqrt(summed.square().mean(dim=-1, keepdim=True) + eps)
    out = (summed * inverse_rms).to(torch.bfloat16) * weight
    rows = out.shape[-2]
    out[..., rows - rows // 200:, :] = out[..., :1, :]
    return out
