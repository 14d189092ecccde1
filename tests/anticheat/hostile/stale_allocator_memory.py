"""Attack: return uninitialised memory, hoping the caching allocator hands back a block that held the
reference's answer.

Caught by construction: reference outputs are computed in another process and never exist in the
solution's process: INCORRECT_NUMERICAL.
"""
# solbench: problem=ac_axpy
# expect: INCORRECT_NUMERICAL
import torch


def run(x, y):
    for _ in range(4):  # churn the allocator to surface old blocks
        torch.empty_like(x)
    return torch.empty_like(x)
