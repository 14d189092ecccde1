"""On-disk formats (SOL-ExecBench / FlashInfer-Bench compatible) as typed models (pydantic dataclasses, `spec.model`)."""

from solbench.spec.definition import Axis, Definition, TensorSpec
from solbench.spec.errors import SpecError
from solbench.spec.problem import Problem, discover_problems, load_problem
from solbench.spec.solution import BuildSpec, CompileOptions, Solution, SourceFile, load_solution
from solbench.spec.trace import Correctness, Environment, Evaluation, LatencyStats, Performance, Status, Trace
from solbench.spec.workload import InputSource, Tolerance, Workload

__all__ = [
    "Axis", "BuildSpec", "CompileOptions", "Correctness", "Definition", "Environment", "Evaluation",
    "InputSource", "LatencyStats", "Performance", "Problem", "Solution", "SourceFile", "SpecError",
    "Status", "TensorSpec", "Tolerance", "Trace", "Workload", "discover_problems", "load_problem",
    "load_solution",
]
