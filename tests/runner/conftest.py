"""A tiny CPU problem and helpers to write solutions for it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

REFERENCE = '''
import torch

def run(x, y):
    return x * 2.0 + y
'''


def write_problem(root: Path, sizes=(64, 96), name: str = "axpy_fp32", reference: str = REFERENCE) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    definition = {
        "name": name,
        "description": "out = 2 x + y",
        "axes": {"n": {"type": "var"}},
        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}, "y": {"shape": ["n"], "dtype": "float32"}},
        "outputs": {"out": {"shape": ["n"], "dtype": "float32"}},
        "reference": textwrap.dedent(reference).lstrip(),
    }
    (folder / "definition.json").write_text(json.dumps(definition, indent=2))
    lines = [json.dumps({"uuid": f"w{i}-{n}", "axes": {"n": n}, "inputs": {"x": {"type": "random"}, "y": {"type": "random"}},
                         "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5}}) for i, n in enumerate(sizes)]
    (folder / "workload.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def write_solution(folder: Path, body: str, name: str = "solution.py") -> Path:
    path = folder / name
    path.write_text("# solbench: problem=axpy_fp32\n" + textwrap.dedent(body).lstrip())
    return path


@pytest.fixture
def problem_dir(tmp_path: Path) -> Path:
    return write_problem(tmp_path / "problems")


@pytest.fixture
def fast_config():
    from solbench.orchestrator.config import RunConfig

    return RunConfig(device="cpu", trials=2, warmup=1, iters=3, adaptive=False, timing_rounds=1, timeout_s=60)
