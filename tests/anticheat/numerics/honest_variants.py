"""Honest variants of a problem's reference, judged with and without strict mode.

An honest kernel differs from the reference by rounding: another accumulation order, another
precision. The strongest such variant that needs no kernel is the reference itself run on inputs
upcast to float64 (outputs rounded back to the declared dtypes): the exact answer, as far from a
low-precision reference as a kernel can honestly be. Beside it: the reference run a second time
(nondeterministic kernels on a GPU), and a shipped optimised baseline. Each is judged by
`check_outputs` in default and strict mode on standard and structured inputs; the official verdict
must not change under strict mode (used by test_strict_verdicts.py and benchmarks-style runs).
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from solbench.check.correctness import check_outputs
from solbench.check.outputs import normalize_outputs
from solbench.inputs import make_inputs
from solbench.inputs.errors import InputError
from solbench.spec import dtypes
from solbench.spec.definition import Definition
from solbench.spec.problem import Problem
from solbench.spec.workload import Workload

UPCAST_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def module_from_source(source: str, name: str) -> types.ModuleType:
    """Trusted problem code (a reference or a shipped baseline) as a module."""
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)  # test helper: the problem's own code
    return module


def workload_bytes(problem: Problem, workload: Workload) -> int:
    axes = problem.definition.resolve_axes(workload.axes)
    total = 0
    specs = {**problem.definition.inputs, **problem.definition.outputs}
    shapes = {**problem.definition.input_shapes(axes), **problem.definition.output_shapes(axes)}
    for name, shape in shapes.items():
        if shape is not None:
            total += math.prod(shape) * max(1, dtypes.storage_bits(specs[name].dtype) // 8)
    return total


def smallest_workload(problem: Problem) -> Workload | None:
    """The workload with the fewest input and output bytes, among those with no blob inputs."""
    usable = [w for w in problem.workloads
              if all(w.source_of(n).kind != "safetensors" for n in problem.definition.inputs)]
    return min(usable, key=lambda w: workload_bytes(problem, w)) if usable else None


def upcast(values: list, dtype: torch.dtype) -> list:
    return [v.to(dtype) if isinstance(v, torch.Tensor) and v.dtype in UPCAST_DTYPES else v for v in values]


def rounded_back(outputs: list, problem: Problem) -> list:
    back = []
    for name, value in zip(problem.definition.outputs, outputs):
        declared = problem.definition.outputs[name].dtype
        if isinstance(value, torch.Tensor) and value.is_floating_point() and dtypes.is_floating(declared) \
                and declared != "float4_e2m1fn_x2":
            value = value.to(dtypes.torch_dtype(declared))
        back.append(value)
    return back


@dataclass
class Judged:
    variant: str
    profile: str
    default: str
    strict: str
    flags: list[str] = field(default_factory=list)
    message: str = ""


@dataclass
class ProblemVerdicts:
    problem: str
    workload: str
    judged: list[Judged] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # variants that could not run, and why

    def changed(self) -> list[Judged]:
        return [j for j in self.judged if j.default != j.strict]


def in_float32(problem: Problem) -> Problem:
    """The problem with its 16-bit float inputs and outputs declared float32 (Triton's CPU interpreter
    computes bfloat16 wrongly, so shipped Triton baselines are judged on a CPU this way)."""
    data = problem.definition.to_dict()
    for group in ("inputs", "outputs"):
        for spec in data[group].values():
            if spec.get("dtype") in ("bfloat16", "float16"):
                spec["dtype"] = "float32"
    return replace(problem, definition=Definition.from_dict(data))


def judge_variants(problem: Problem, device: str = "cpu", seed: int = 1234,
                   profiles: tuple[str, ...] = ("standard", "structured"),
                   baseline: Callable | None = None, round_reference: bool = False) -> ProblemVerdicts:
    """Every honest variant of the problem's smallest workload, judged in default and strict mode;
    `baseline` (value-returning, the reference's signature) is judged beside them. `round_reference`
    rounds the reference's float outputs to the declared dtypes (for `in_float32` problems, whose
    references may still round to bfloat16 on purpose)."""
    definition = problem.definition
    workload = smallest_workload(problem)
    if workload is None:
        return ProblemVerdicts(problem.name, "", skipped=["no workload without blob inputs"])
    verdicts = ProblemVerdicts(problem.name, workload.uuid)
    module = module_from_source(definition.reference, f"reference_{problem.name}")
    entry = getattr(module, definition.custom_inputs_entrypoint) if definition.custom_inputs_entrypoint else None
    axes = definition.resolve_axes(workload.axes)
    with torch.no_grad():
        for profile in profiles:
            try:
                inputs = make_inputs(definition, workload, axes, seed=seed, device=device, custom_entrypoint=entry,
                                     profile=profile)
            except InputError as exc:
                verdicts.skipped.append(f"{profile}: inputs: {exc}")
                continue
            try:
                reference = normalize_outputs(module.run(*copies(inputs)), definition, axes)
                if round_reference:
                    reference = rounded_back(reference, problem)
            except Exception as exc:  # noqa: BLE001 - a reference that cannot run here is reported, not judged
                verdicts.skipped.append(f"{profile}: reference: {type(exc).__name__}: {exc}"[:300])
                continue
            candidates: dict[str, Callable[[list], object]] = {
                "reference_again": lambda args: module.run(*copies(args)),
                "reference_float64": lambda args: module.run(*upcast(args, torch.float64)),
            }
            if baseline is not None:
                candidates["baseline"] = lambda args: baseline(*copies(args))
            for variant, compute in candidates.items():
                try:
                    outputs = rounded_back(normalize_outputs(compute(inputs), definition, axes), problem)
                except Exception as exc:  # noqa: BLE001
                    verdicts.skipped.append(f"{profile}: {variant}: {type(exc).__name__}: {exc}"[:300])
                    continue
                default, c = check_outputs(outputs, reference, definition, workload.tolerance, axes)
                strict, s = check_outputs(outputs, reference, definition, workload.tolerance, axes, strict=True)
                verdicts.judged.append(Judged(variant, profile, default.value, strict.value, list(c.flags),
                                              (s.message or c.message or "")[:400]))
    return verdicts


def copies(values: list) -> list:
    """Fresh copies: a reference may write into its inputs."""
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def shipped_baselines(repo: Path) -> list[tuple[Path, Path]]:
    """(problem folder, baseline file) for every problem under problem_defs/ that ships one."""
    from solbench.spec.problem import discover_problems, find_baseline

    found = []
    for folder in discover_problems(repo / "problem_defs"):
        path = find_baseline(folder)
        if path is not None:
            found.append((folder, path))
    return found
