"""Legitimate (agent style): plain `torch.compile` (default mode, automatic dynamic shapes: the second
shape recompiles with symbolic sizes), destination-passing style through `out.copy_`.
"""
# solbench: problem=ac_rmsnorm
# expect: PASSED
import torch


@torch.compile
def _rmsnorm(x, weight):
    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + 1e-6) * weight


def run(x, weight, out):
    out.copy_(_rmsnorm(x, weight))
