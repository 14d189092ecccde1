"""The optimised baselines shipped with the core problems (reference_impls/core/<name>.baseline.py).

On CPU the Triton kernels run in the interpreter (TRITON_INTERPRET=1, set in tests/conftest.py),
which computes bfloat16 wrongly, so they are checked here in float32 and float16 against the maths
of each problem, on small and ragged shapes that take every code path. On a GPU (`-m gpu`), each
baseline is run as a solution against its problem's reference, in bf16, by the real runner, and
every trace of the reference records the shipped baseline's time.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from solbench.spec.problem import baseline_solution, find_baseline, load_problem
from tests.child_env import repo_env

ROOT = Path(__file__).resolve().parents[1]
CORE = ("rmsnorm_h4096", "swiglu_mlp_gateup_h2048_i6144", "gemm_n4096_k4096", "layernorm_fp32_h1024")
_counter = itertools.count()


def baseline(name: str):
    path = ROOT / "reference_impls" / "core" / f"{name}.baseline.py"
    spec = importlib.util.spec_from_file_location(f"solbench_baseline_test_{next(_counter)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def randn(*shape, dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    assert actual.dtype == dtype and actual.shape == expected.shape
    tol = 1e-4 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(actual.double(), expected.to(dtype).double(), atol=tol, rtol=tol)


@pytest.mark.parametrize("name", CORE)
def test_every_core_problem_ships_a_baseline_with_the_reference_signature(name):
    problem = load_problem(ROOT / "problem_defs" / "core" / name)
    assert problem.baseline_path == ROOT / "reference_impls" / "core" / f"{name}.baseline.py"
    solution = baseline_solution(problem)
    assert solution.spec.languages == ("triton",)
    assert not solution.spec.destination_passing_style  # `run(<inputs>)` returning the outputs, as the reference


DTYPES = [torch.float32, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_baseline(dtype):
    x, w = randn(5, 4096, dtype=dtype, seed=1), randn(4096, dtype=dtype, seed=2)
    xf = x.double()
    expected = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    close(baseline("rmsnorm_h4096").run(x, w), expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [1024, 1000])
def test_layernorm_baseline_with_a_ragged_last_tile(dtype, width):
    """7 rows at 4 rows per program: the second program's last row is masked off (and, 1000 wide,
    the last 24 columns of each row)."""
    x = randn(7, width, dtype=dtype, seed=3, scale=3.0) + 1.5
    w, b = randn(width, dtype=dtype, seed=4), randn(width, dtype=dtype, seed=5)
    xf = x.double()
    mean = xf.mean(-1, keepdim=True)
    expected = (xf - mean) / torch.sqrt((xf - mean).pow(2).mean(-1, keepdim=True) + 1e-5) * w.double() + b.double()
    close(baseline("layernorm_fp32_h1024").run(x, w, b), expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu_baseline_with_a_ragged_activation_block(dtype):
    t, h, inter = 3, 64, 1500  # 1500 activations in a 2048-wide block
    x = randn(t, h, dtype=dtype, seed=6)
    gate_up = randn(2 * inter, h, dtype=dtype, seed=7, scale=h ** -0.5)
    down = randn(h, inter, dtype=dtype, seed=8, scale=inter ** -0.5)
    module = baseline("swiglu_mlp_gateup_h2048_i6144")
    projected = torch.nn.functional.linear(x, gate_up)
    g, u = projected.double().chunk(2, dim=-1)
    activation = (g * torch.sigmoid(g) * u).to(dtype)
    close(module.silu_times_up(projected), activation.double(), dtype)
    close(module.run(x, gate_up, down), torch.nn.functional.linear(activation, down).double(), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("m", "n", "k"), [(1, 64, 520), (5, 96, 100), (40, 70, 300), (100, 130, 64),
                                           (300, 256, 96)])
def test_gemm_baseline_every_plan(m, n, k, dtype):
    """Split-K 4 (with a ragged last split), K too short to split, split-K 2, plain tiles, big tiles."""
    a, b = randn(m, k, dtype=dtype, seed=9), randn(n, k, dtype=dtype, seed=10)
    expected = a.double() @ b.double().T
    actual = baseline("gemm_n4096_k4096").run(a, b)
    assert actual.dtype == dtype and actual.shape == (m, n)
    tol = 1e-4 if dtype == torch.float32 else 2e-2  # fp16: rounding of C = sum over k of O(1) terms
    torch.testing.assert_close(actual.double(), expected, atol=tol * k ** 0.5, rtol=tol)


def test_baseline_discovery(tmp_path):
    """`<folder>/baseline.py` first, else reference_impls/<group>/<name>.baseline.py beside problem_defs/."""
    folder = tmp_path / "problem_defs" / "group" / "p1"
    folder.mkdir(parents=True)
    assert find_baseline(folder) is None
    mirrored = tmp_path / "reference_impls" / "group" / "p1.baseline.py"
    mirrored.parent.mkdir(parents=True)
    mirrored.write_text("def run(x):\n    return x\n")
    assert find_baseline(folder) == mirrored.resolve()
    (folder / "baseline.py").write_text("def run(x):\n    return x\n")
    assert find_baseline(folder) == (folder / "baseline.py").resolve()
    assert find_baseline(tmp_path / "elsewhere") is None


# -- on a GPU: the real runner, bf16 -------------------------------------------------------------

def _solbench(*args: str) -> subprocess.CompletedProcess:
    env = repo_env(ROOT)
    return subprocess.run([sys.executable, "-m", "solbench", *args], env=env, capture_output=True, text=True,
                          timeout=1800, cwd=ROOT)


@pytest.mark.gpu
@pytest.mark.parametrize("name", CORE)
def test_baseline_passes_as_a_solution_and_is_recorded_on_gpu(name):
    problem = ROOT / "problem_defs" / "core" / name
    solution = ROOT / "reference_impls" / "core" / f"{name}.baseline.py"
    result = _solbench("run", str(problem), "-s", str(solution), "--json", "--max-workloads", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    for line in result.stdout.splitlines():
        evaluation = json.loads(line)["evaluation"]
        assert evaluation["status"] == "PASSED", evaluation["log"][-2000:]
        shipped = evaluation["sol"]["baselines_ms"]["shipped"]
        assert shipped is not None and shipped > 0, evaluation.get("warnings")
        assert evaluation["sol"]["t_baseline_ms"] <= shipped
