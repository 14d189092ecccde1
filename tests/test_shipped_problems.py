"""The problems solbench ships load, and their references are the readable files, verbatim."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from solbench.spec import discover_problems, load_problem

ROOT = Path(__file__).resolve().parents[1]
PROBLEM_DEFS = ROOT / "problem_defs"
REFERENCE_IMPLS = ROOT / "reference_impls"
CORE = ("rmsnorm_h4096", "swiglu_mlp_gateup_h2048_i6144", "gemm_n4096_k4096", "layernorm_fp32_h1024")

SHIPPED = discover_problems(PROBLEM_DEFS) if PROBLEM_DEFS.is_dir() else []


def _id(path: Path) -> str:
    return str(path.relative_to(PROBLEM_DEFS))


def test_core_problems_are_shipped():
    names = {p.name for p in SHIPPED}
    assert set(CORE) <= names


@pytest.mark.parametrize("folder", SHIPPED, ids=_id)
def test_shipped_problem_loads(folder: Path):
    problem = load_problem(folder)
    assert problem.name == folder.name  # the folder is named after the problem
    assert problem.workloads
    uuids = [w.uuid for w in problem.workloads]
    assert len(set(uuids)) == len(uuids)
    for workload in problem.workloads:
        problem.definition.resolve_axes(workload.axes)


@pytest.mark.parametrize("folder", SHIPPED, ids=_id)
def test_reference_matches_readable_file(folder: Path):
    """Where reference_impls/<same relative path>.py exists, it is exactly the definition's reference."""
    readable = REFERENCE_IMPLS / folder.relative_to(PROBLEM_DEFS).with_suffix(".py")
    if not readable.is_file():
        pytest.skip(f"no readable reference at {readable.relative_to(ROOT)}")
    reference = json.loads((folder / "definition.json").read_text())["reference"]
    assert reference == readable.read_text(), (
        f"{folder.relative_to(ROOT)}/definition.json reference differs from {readable.relative_to(ROOT)}; "
        f"run python problem_defs/core/generate.py")


@pytest.mark.parametrize("name", CORE)
def test_core_problem_shape(name: str):
    """Core problems: 6-8 workloads, tiny ones first (the CPU smoke run takes two), tokens up to 8192."""
    problem = load_problem(PROBLEM_DEFS / "core" / name)
    definition = problem.definition
    assert 6 <= len(problem.workloads) <= 8
    assert all(a.description for a in definition.axes.values())
    assert all(t.description for t in (definition.inputs | definition.outputs).values())
    tokens = [next(iter(w.axes.values())) for w in problem.workloads]
    assert tokens[0] == 1 and tokens[1] <= 16
    assert tokens == sorted(tokens) and tokens[-1] == 8192
    for workload in problem.workloads:
        floating = {t.dtype for t in definition.outputs.values()}
        expected = 1e-4 if floating == {"float32"} else 1e-2
        assert workload.tolerance.max_atol == expected and workload.tolerance.max_rtol == expected


def test_core_generator_is_up_to_date():
    """The checked-in files are what generate.py writes (uuids deterministic, nothing hand-edited)."""
    spec = importlib.util.spec_from_file_location("core_generate", PROBLEM_DEFS / "core" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    assert sorted(p["name"] for p in generate.PROBLEMS) == sorted(CORE)
    for problem in generate.PROBLEMS:
        for filename, text in generate.render(problem).items():
            assert (PROBLEM_DEFS / "core" / problem["name"] / filename).read_text() == text
