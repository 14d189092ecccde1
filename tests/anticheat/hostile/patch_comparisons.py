"""Attack: make every comparison helper a checker might use in the solution's process answer "equal"
(torch.testing.assert_close, numpy.allclose / numpy.testing, unittest's assertions), then return zeros.

Harmless by construction: outputs are judged in the orchestrator, a different process that never
imports solution code: INCORRECT_NUMERICAL.
"""
# solbench: problem=ac_axpy
# expect: INCORRECT_NUMERICAL
import unittest

import numpy
import numpy.testing
import torch
import torch.testing

torch.testing.assert_close = lambda *a, **k: None
numpy.allclose = lambda *a, **k: True
numpy.testing.assert_allclose = lambda *a, **k: None
unittest.TestCase.assertAlmostEqual = lambda *a, **k: None


def run(x, y):
    return torch.zeros_like(x)
