"""Checking outputs: structure (types, shapes, dtypes, aliasing) and numbers (tolerances, NaN/Inf
rules, exact integers). Runs in the orchestrator on CPU copies, except `structural_check`, which the
worker runs on the device before copying."""

from solbench.check.correctness import OutputComparison, check_outputs, compare, merge_trials
from solbench.check.outputs import OutputError, normalize_outputs, structural_check

__all__ = ["OutputComparison", "OutputError", "check_outputs", "compare", "merge_trials", "normalize_outputs",
           "structural_check"]
