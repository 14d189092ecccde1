"""Legitimate: destination-passing style, writing into the given output in place (out=, then add_)."""
# solbench: problem=ac_axpy
# expect: PASSED
import torch


def run(x, y, out):
    torch.mul(x, 2.0, out=out)
    out.add_(y)
