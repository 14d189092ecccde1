"""Attack: patch solbench's correctness checker (and torch.allclose / torch.testing) in the worker so
that everything compares equal, then return zeros.

Harmless by construction: outputs are compared in the orchestrator, which never imports solution
code; the patched copies live only in the solution's own process. INCORRECT_NUMERICAL.
"""
# solbench: problem=ac_axpy
# expect: INCORRECT_NUMERICAL
import torch
import torch.testing

import solbench.check.correctness as correctness
from solbench.spec.trace import Correctness, Status

correctness.check_outputs = lambda *a, **k: (Status.PASSED, Correctness())
correctness.compare = lambda *a, **k: None
torch.allclose = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None


def run(x, y):
    return torch.zeros_like(x)
