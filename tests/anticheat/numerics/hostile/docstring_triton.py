"""Attack: look like a Triton kernel so a CPU run skips it (SKIPPED, exit 0) instead of judging it.

Only text mentions Triton, e.g. a usage note:

    import triton

The language is taken from the imports the code really makes, so this is PyTorch, it runs on the
CPU, and its missing weight multiply is INCORRECT_NUMERICAL.
"""
# solbench: problem=nm_rms_norm
# expect: INCORRECT_NUMERICAL
# expect-standard: INCORRECT_NUMERICAL
# expect-strict: INCORRECT_NUMERICAL
import torch


def run(hidden_states, residual, weight, eps):
    summed = (hidden_states + residual).float()
    return (summed * torch.rsqrt(summed.square().mean(dim=-1, keepdim=True) + eps)).to(torch.bfloat16)
