"""Legitimate: precomputes constants at import (a table of scales derived from the definition's
constants) and reuses them on every call; nothing depends on the inputs."""
# solbench: problem=ac_axpy
# expect: PASSED
import torch

_SCALE = {n: 2.0 for n in range(1, 1 << 16)}
_TWO = torch.tensor(2.0)


def run(x, y):
    scale = _SCALE.get(x.shape[0], 2.0)
    return torch.addcmul(y, x, _TWO) if scale == 2.0 else x * scale + y
