"""The new languages on a GPU: the orchestrator reads the GPU's compute capability as the worker does,
and a cuTile solution ends SKIPPED on Hopper with the tileiras reason (its loader runs elsewhere).
Every example of every language runs in tests/test_example_solutions.py::test_example_on_gpu and, through
the whole runner with graphs on and off, in benchmarks/languages_gpu.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from solbench.orchestrator.devices import compute_capability
from tests.languages.test_language_runs import official_file
from tests.runner.conftest import write_problem

pytestmark = pytest.mark.gpu

CUTILE_AXPY = '''import cuda.tile as ct
import torch

TILE = 32


@ct.kernel
def _axpy(x, y, out):
    block = ct.bid(0)
    a = ct.load(x, index=(block,), shape=(TILE,))
    b = ct.load(y, index=(block,), shape=(TILE,))
    ct.store(out, index=(block,), tile=a * 2.0 + b)


def run(x, y, out):
    ct.launch(torch.cuda.current_stream(), ((x.shape[0] + TILE - 1) // TILE, 1, 1), _axpy, (x, y, out))
'''


def cutile_axpy_file(folder: Path) -> Path:
    """The axpy problem's solution in cuTile, in the official JSON format (also run by languages_gpu.py)."""
    path = official_file(folder, "cutile")
    data = json.loads(path.read_text())
    data["sources"][0]["content"] = CUTILE_AXPY
    path.write_text(json.dumps(data))
    return path


def test_orchestrator_reads_the_capability_the_worker_sees():
    assert compute_capability("cuda:0") == torch.cuda.get_device_capability(0)
    assert compute_capability("cpu") is None


def test_cutile_solution_is_skipped_on_hopper_and_judged_elsewhere(tmp_path):
    from solbench import languages
    from solbench.api import evaluate

    missing = languages.get("cutile").requires[0].refusal("cutile")
    if missing:
        pytest.skip(missing)
    problem = write_problem(tmp_path / "problems", sizes=(64, 96))
    traces = evaluate(problem, cutile_axpy_file(tmp_path), device="cuda", max_workloads=2)
    statuses = {t.evaluation.status.value for t in traces}
    if torch.cuda.get_device_capability()[0] == 9:
        assert statuses == {"SKIPPED"}
        assert "Hopper" in traces[0].evaluation.log and "tileiras 13.2" in traces[0].evaluation.log
    else:
        assert statuses == {"PASSED"}, traces[0].evaluation.log
