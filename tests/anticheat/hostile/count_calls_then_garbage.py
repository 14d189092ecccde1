"""Attack: detect the timing phase by counting calls (the correctness trials come first) and return a
cheap wrong answer afterwards.

Caught: the outputs of sampled timed calls (and always the last one) are verified: INCORRECT_NUMERICAL.
"""
# solbench: problem=ac_axpy
# expect: INCORRECT_NUMERICAL
# expect-log: timed iteration
import torch

_calls = {}


def run(x, y):
    n = x.shape[0]
    _calls[n] = _calls.get(n, 0) + 1
    if _calls[n] > 2:
        return torch.empty_like(x).fill_(1.0)
    return x * 2.0 + y
