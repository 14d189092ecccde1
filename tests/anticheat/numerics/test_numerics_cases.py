"""Numerics anti-cheat cases: hostile solutions the official tolerance lets through, and honest ones
that must pass with no flag, on a bf16 residual-add RMSNorm (nm_rms_norm/, shaped like a decoder
layer's norm) that runs on a CPU.

Each solution file says what it does in its docstring and what must happen in header comments:

    # solbench: problem=nm_rms_norm
    # expect: INCORRECT_NUMERICAL       (default mode, every workload, correctness trials as the runner
    #                                    runs them: trial 0 standard, the others structured)
    # expect-standard: PASSED           (default mode on standard inputs only; default: `expect`)
    # expect-flags: systematic_bias     (numerics flags every PASSED workload must carry; honest: none)
    # expect-strict: INCORRECT_NUMERICAL (strict mode; honest: PASSED)
    # expect-strict-standard: PASSED|INCORRECT_NUMERICAL (strict mode, standard inputs only; "A|B": either;
    #                                    default: expect-strict)
    # needs: profiles                   (end to end, the verdict needs the structured profile in the
    #                                    worker requests)

The verdicts are checked three ways: in process (`check_outputs` on inputs from `make_inputs`, both
profiles, several seeds: caught every time), end to end in default mode through the real runner
(worker processes, `run_jobs`), and through the `solbench run` CLI for the language case.
End to end, the orchestrator carries `strict` (RunConfig.strict) and each trial's input profile into
the worker requests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import torch

from solbench.check.correctness import check_outputs
from solbench.check.outputs import normalize_outputs
from solbench.inputs import make_inputs
from solbench.inputs.profiles import trial_profile
from solbench.spec.problem import load_problem
from solbench.spec.solution import load_solution
from solbench.spec.trace import Status

HERE = Path(__file__).resolve().parent
PROBLEM_DIR = HERE / "nm_rms_norm"
REPO = HERE.parents[2]
SEEDS = (11, 12, 13)
TRIALS = 3


@dataclass
class NumericsCase:
    path: Path
    kind: str  # "hostile" or "honest"
    expect: str
    expect_standard: str
    flags: list[str] = field(default_factory=list)
    strict: str = "PASSED"
    strict_standard: str = "PASSED"
    needs_profiles: bool = False

    @property
    def id(self) -> str:
        return f"{self.kind}/{self.path.stem}"


def discover() -> list[NumericsCase]:
    cases = []
    for kind in ("hostile", "honest"):
        for path in sorted((HERE / kind).glob("*.py")):
            headers = dict(re.findall(r"^#\s*(expect[a-z-]*|needs):\s*(.+?)\s*$", path.read_text(), re.M))
            expect = headers["expect"]
            strict = headers.get("expect-strict", expect)
            cases.append(NumericsCase(path, kind, expect, headers.get("expect-standard", expect),
                                      headers.get("expect-flags", "").split(), strict,
                                      headers.get("expect-strict-standard", strict), headers.get("needs") == "profiles"))
    return cases


CASES = discover()


def test_the_cases_cover_the_issue():
    names = {c.path.stem for c in CASES}
    assert {"global_rms", "systematic_bias", "garbage_last_rows", "docstring_triton"} <= names
    assert all(c.strict == "PASSED" and not c.flags and c.expect == "PASSED" for c in CASES if c.kind == "honest")
    assert all(c.strict != "PASSED" for c in CASES if c.kind == "hostile")
    assert len([c for c in CASES if c.kind == "honest"]) >= 3


# -- in process: every seed, both profiles ---------------------------------------------------------

@pytest.fixture(scope="module")
def problem():
    return load_problem(PROBLEM_DIR)


def module_of(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # the test's own solution files and problem
    return module


@pytest.fixture(scope="module")
def references(problem):
    """Inputs and reference outputs per (profile, seed), on the first workload, computed once."""
    reference = module_of(problem.definition.reference, "reference")
    workload = problem.workloads[0]
    axes = problem.definition.resolve_axes(workload.axes)
    cache = {}
    for profile in ("standard", "structured"):
        for seed in SEEDS:
            inputs = make_inputs(problem.definition, workload, axes, seed=seed, device="cpu", profile=profile)
            expected = normalize_outputs(reference.run(*[v.clone() if isinstance(v, torch.Tensor) else v
                                                         for v in inputs]), problem.definition, axes)
            cache[profile, seed] = (inputs, expected)
    return workload, axes, cache


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["standard", "structured"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_verdicts_in_process_every_seed(case, profile, problem, references):
    workload, axes, cache = references
    solution = module_of(case.path.read_text(), case.path.stem)
    expect = case.expect_standard if profile == "standard" else case.expect
    expect_strict = (case.strict_standard if profile == "standard" else case.strict).split("|")
    for seed in SEEDS:
        inputs, expected = cache[profile, seed]
        got = normalize_outputs(solution.run(*[v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]),
                                problem.definition, axes)
        status, c = check_outputs(got, expected, problem.definition, workload.tolerance, axes)
        where = f"{case.id} {profile} seed {seed}: {status} {c.flags} {c.message}"
        assert status.value == expect, where
        if status == Status.PASSED:
            assert c.flags == case.flags if case.kind == "honest" else set(case.flags) <= set(c.flags), where
        status, c = check_outputs(got, expected, problem.definition, workload.tolerance, axes, strict=True)
        assert status.value in expect_strict, f"strict: {where} -> {status} {c.message}"


# -- end to end, default mode ----------------------------------------------------------------------

def fast_config(**overrides):
    from solbench.orchestrator.config import RunConfig

    config = RunConfig(device="cpu", trials=TRIALS, warmup=1, iters=3, adaptive=False, timing_rounds=1,
                       timed_input_sets=1, checked_timed_outputs=1, timeout_s=300, compile_timeout_s=300)
    return replace(config, **overrides)


def run_cases(cases: list[NumericsCase], config) -> dict[str, list]:
    from solbench.orchestrator.jobs import make_job
    from solbench.orchestrator.scheduler import run_jobs

    problem = load_problem(PROBLEM_DIR)
    jobs, ids = [], {}
    for case in cases:
        solution = load_solution(case.path, problem.definition)
        jobs.append(make_job(problem, solution, config.max_workloads))
        ids[solution.content_hash()] = case.id
    results: dict[str, list] = {case.id: [] for case in cases}
    for trace in run_jobs(jobs, config, ["cpu", "cpu"]):
        results[ids[trace.solution_hash]].append(trace)
    return results


@pytest.fixture(scope="module")
def default_results():
    return run_cases(CASES, fast_config())


def end_to_end_params(expectation: str):
    return list(CASES)


def describe(traces) -> str:
    return "\n".join(f"{t.workload_uuid}: {t.status} {t.evaluation.correctness and t.evaluation.correctness.flags} "
                     f"{t.evaluation.log[-600:]}" for t in traces)


@pytest.mark.slow
@pytest.mark.parametrize("case", end_to_end_params("expect"), ids=lambda c: c.id)
def test_end_to_end_default_mode(case, default_results):
    traces = default_results[case.id]
    assert len(traces) == 2, describe(traces)
    assert all(t.status.value == case.expect for t in traces), describe(traces)
    for t in traces:
        if t.status == Status.PASSED:
            flags = t.evaluation.correctness.flags
            assert (flags == []) if case.kind == "honest" else set(case.flags) <= set(flags), describe(traces)
            if case.flags:
                assert "numerics flagged" in (t.evaluation.correctness.message or ""), describe(traces)


@pytest.mark.slow
def test_end_to_end_strict_mode():
    hostile = [c for c in CASES if c.kind == "hostile" and c.strict != c.expect]
    honest = [c for c in CASES if c.kind == "honest"]
    results = run_cases(hostile + honest, fast_config(strict=True))
    for case in hostile + honest:
        traces = results[case.id]
        assert traces and all(t.status.value == case.strict for t in traces), f"{case.id}\n{describe(traces)}"


@pytest.mark.slow
def test_cli_does_not_skip_a_file_that_only_mentions_triton(tmp_path):
    """The issue's case: `import triton` in a docstring made a wrong PyTorch file SKIPPED on a CPU,
    exit 0. It is judged, and the run exits 1."""
    out = tmp_path / "traces.jsonl"
    result = subprocess.run([sys.executable, "-m", "solbench", "run", str(PROBLEM_DIR), "--solution",
                             str(HERE / "hostile" / "docstring_triton.py"), "--device", "cpu", "--max-workloads", "1",
                             "--trials", "1", "--iters", "3", "-o", str(out)],
                            capture_output=True, text=True, cwd=REPO, timeout=600)
    traces = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert [t["evaluation"]["status"] for t in traces] == ["INCORRECT_NUMERICAL"]


def test_trial_profiles_of_the_end_to_end_runs():
    """What the runner is asked to do once it carries profiles: trial 0 standard, the others structured."""
    assert [trial_profile(t, TRIALS) for t in range(TRIALS)] == ["standard", "structured", "structured"]
