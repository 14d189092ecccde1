"""Legitimate: torch.compile (Dynamo + Inductor), which starts compile threads/processes and patches
frames internally; it must not trip the thread, process or integrity checks."""
# solbench: problem=ac_axpy
# expect: PASSED
import torch


@torch.compile(dynamic=False)
def _axpy(x, y):
    return x * 2.0 + y


def run(x, y):
    return _axpy(x, y)
