"""Attack: seed the global RNGs at import and "predict" the inputs, returning the answer for the
predicted inputs without reading the real ones.

Caught: inputs come from private generators seeded from a secret per-run seed, never from the global
RNG; the prediction is wrong: INCORRECT_NUMERICAL.
"""
# solbench: problem=ac_axpy
# expect: INCORRECT_NUMERICAL
import random

import torch

random.seed(0)
torch.manual_seed(0)


def run(x, y):
    torch.manual_seed(0)
    guess_x = torch.randn(x.shape, dtype=x.dtype)
    guess_y = torch.randn(y.shape, dtype=y.dtype)
    return guess_x * 2.0 + guess_y
