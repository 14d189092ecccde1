"""Legitimate (agent style): torch.compile with mode="max-autotune-no-cudagraphs" and static shapes, so
every new workload shape recompiles and re-tunes Inductor's generated kernels on its first call.
"""
# solbench: problem=ac_rmsnorm
# expect: PASSED
import torch


@torch.compile(mode="max-autotune-no-cudagraphs", dynamic=False, fullgraph=True)
def _rmsnorm(x, weight):
    x32 = x.float()
    rstd = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    return (x32 * rstd).to(x.dtype) * weight


def run(x, weight):
    return _rmsnorm(x, weight)
