"""Legitimate (issue 31): a prepared copy of the weight, cached by the weight's identity, `data_ptr()` and
`_version` (PyTorch bumps `_version` on every in-place write, including the harness's refills), so the copy
is rebuilt whenever the weight's values may have changed. Identity is held by a weak reference, never `id()`:
a freed weight's id and address are reused by the next tensor (on CPU the next workload's weight once hit the
stale copy). Correct under PyTorch's rules when launched.
Under CUDA graphs a replay never runs the Python check: solbench checks a graph on fresh values before
timing it, and times this call as launched (flagged `cuda_graph_unfaithful`) instead of failing it."""
# solbench: problem=ac_rmsnorm
# expect: PASSED
# expect-flag: gpu:cuda_graph_unfaithful
import weakref

import torch

_CACHE = {}  # data_ptr -> (a weak reference to the weight tensor, its _version, the prepared copy)


def _prepared(weight):
    hit = _CACHE.get(weight.data_ptr())
    if hit is None or hit[0]() is not weight or hit[1] != weight._version:
        hit = (weakref.ref(weight), weight._version, (weight * 1.0).contiguous())  # stands for a real preparation
        _CACHE[weight.data_ptr()] = hit
    return hit[2]


def run(x, weight):
    w = _prepared(weight)
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(variance + 1e-6) * w
