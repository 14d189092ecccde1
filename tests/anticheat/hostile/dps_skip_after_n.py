"""Attack: a destination-passing kernel that writes its output during the correctness trials only and
returns at once while timed, leaving the destination as the harness gave it.

Caught: destinations are NaN-filled before every call and sampled timed outputs are verified:
INCORRECT_NUMERICAL.
"""
# solbench: problem=ac_axpy
# expect: INCORRECT_NUMERICAL
# expect-log: timed iteration
import torch

_calls = {}


def run(x, y, out):
    n = x.shape[0]
    _calls[n] = _calls.get(n, 0) + 1
    if _calls[n] <= 2:
        torch.add(y, x, alpha=2.0, out=out)
