"""Legitimate (issue 31): the result is a `typing.NamedTuple` of the outputs (as `torch.return_types` are):
a plain container, read through the tuple's own storage."""
# solbench: problem=ac_axpy
# expect: PASSED
from typing import NamedTuple

import torch


class Result(NamedTuple):
    out: torch.Tensor


def run(x, y):
    return Result(out=x * 2.0 + y)
