"""The official problems keep their verdicts under strict mode: honest variants of the shared
references (run again; run in float64) and the shipped optimised baselines raise no numerics flag,
so strict mode changes no verdict. Judged on standard and structured inputs (honest_variants.py).

On a CPU: every shared problem whose smallest workload holds at most `CPU_SAMPLE_BYTES` (55 problems
of all four categories), and the shipped baselines in float32 (Triton's interpreter computes
bfloat16 wrongly). On a GPU (`-m gpu`): a larger sample in the problems' own dtypes, and the
baselines in theirs.
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

from solbench.spec.problem import discover_problems, load_problem
from tests.anticheat.numerics.honest_variants import (
    ProblemVerdicts,
    in_float32,
    judge_variants,
    shipped_baselines,
    smallest_workload,
    workload_bytes,
)
from tests.conftest import HAS_CUDA

REPO = Path(__file__).resolve().parents[3]
CPU_SAMPLE_BYTES = 4 << 20
GPU_SAMPLE_BYTES = 256 << 20
_counter = itertools.count()


def sample(root: Path, limit_bytes: int) -> list[Path]:
    chosen = []
    for folder in discover_problems(root):
        problem = load_problem(folder)
        workload = smallest_workload(problem)
        if workload is not None and workload_bytes(problem, workload) <= limit_bytes:
            chosen.append(folder)
    return chosen


def summary(results: list[ProblemVerdicts]) -> str:
    lines = []
    for r in results:
        for j in r.judged:
            if j.default != j.strict or j.flags:
                lines.append(f"{r.problem} {r.workload} {j.variant} {j.profile}: default {j.default}, strict {j.strict}, "
                             f"flags {j.flags}: {j.message}")
    return "\n".join(lines)


def judge_sample(folders: list[Path], device: str) -> list[ProblemVerdicts]:
    return [judge_variants(load_problem(folder), device=device) for folder in folders]


def assert_unchanged(results: list[ProblemVerdicts], minimum_problems: int) -> None:
    judged = [r for r in results if r.judged]
    assert len(judged) >= minimum_problems, [(r.problem, r.skipped) for r in results if not r.judged]
    profiles = {j.profile for r in judged for j in r.judged}
    assert profiles == {"standard", "structured"}
    assert not any(r.changed() for r in results), summary(results)
    assert not any(j.flags for r in results for j in r.judged), summary(results)


@pytest.mark.slow
def test_shared_references_keep_their_verdicts_under_strict_mode_cpu(sol_execbench_dir):
    folders = sample(sol_execbench_dir, CPU_SAMPLE_BYTES)
    assert len({f.parent.name for f in folders}) == 4, "every category is represented"
    assert_unchanged(judge_sample(folders, "cpu"), minimum_problems=45)


def baseline_function(path: Path):
    """The shipped baseline's `run`, imported from its file (Triton reads kernel source from files)."""
    spec = importlib.util.spec_from_file_location(f"solbench_strict_baseline_{next(_counter)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run


@pytest.mark.slow
def test_shipped_baselines_keep_their_verdicts_under_strict_mode_cpu():
    found = shipped_baselines(REPO)
    assert found, "problem_defs ships optimised baselines"
    results = [judge_variants(in_float32(load_problem(folder)), device="cpu", baseline=baseline_function(path),
                              round_reference=True) for folder, path in found]
    assert all(any(j.variant == "baseline" for j in r.judged) for r in results), [r.skipped for r in results]
    assert all(j.default == "PASSED" for r in results for j in r.judged if j.variant == "baseline"), summary(results)
    assert_unchanged(results, minimum_problems=len(found))


@pytest.mark.gpu
def test_shared_references_keep_their_verdicts_under_strict_mode_gpu(sol_execbench_dir):
    if not HAS_CUDA:
        pytest.skip("needs a CUDA GPU")
    folders = sample(sol_execbench_dir, GPU_SAMPLE_BYTES)
    assert_unchanged(judge_sample(folders, "cuda"), minimum_problems=150)


@pytest.mark.gpu
def test_shipped_baselines_keep_their_verdicts_under_strict_mode_gpu():
    if not HAS_CUDA:
        pytest.skip("needs a CUDA GPU")
    found = shipped_baselines(REPO)
    results = [judge_variants(load_problem(folder), device="cuda", baseline=baseline_function(path))
               for folder, path in found]
    assert all(j.default == "PASSED" for r in results for j in r.judged if j.variant == "baseline"), summary(results)
    assert_unchanged(results, minimum_problems=len(found))
