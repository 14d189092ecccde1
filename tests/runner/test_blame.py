"""Failures the solution is not to blame for: a missing blob ends MISSING_DATA (the reference worker
confirms the solution's worker's report), and a reference that cannot run here ends INVALID_REFERENCE
even when the solution failed first."""

from __future__ import annotations

import json

from solbench import api
from tests.runner.conftest import write_problem, write_solution

GOOD = """
def run(x, y):
    return 2.0 * x + y
"""


def blob_problem(tmp_path):
    folder = write_problem(tmp_path / "problems", sizes=(64,))
    line = json.loads((folder / "workload.jsonl").read_text())
    line["inputs"]["x"] = {"type": "safetensors", "path": "blobs/absent.safetensors", "tensor_key": "x"}
    (folder / "workload.jsonl").write_text(json.dumps(line) + "\n")
    return folder


def test_missing_blob_is_missing_data(tmp_path, fast_config):
    folder = blob_problem(tmp_path)
    trace = api.evaluate(folder, write_solution(folder, GOOD), config=fast_config)[0]
    assert trace.status.value == "MISSING_DATA", trace.evaluation.log
    assert "absent.safetensors" in trace.evaluation.log


FAILS_HERE = """
def run(x, y):
    raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED (no such number format on this GPU)")
"""


def test_a_reference_that_cannot_run_here_is_not_the_solutions_failure(tmp_path, fast_config):
    folder = write_problem(tmp_path / "problems", sizes=(64,), reference=FAILS_HERE)
    trace = api.evaluate(folder, write_solution(folder, FAILS_HERE), config=fast_config)[0]
    assert trace.status.value == "INVALID_REFERENCE", trace.evaluation.log
    assert "the solution failed too" in trace.evaluation.log


def test_a_failing_solution_is_still_its_own_failure(tmp_path, fast_config):
    folder = write_problem(tmp_path / "problems", sizes=(64,))
    trace = api.evaluate(folder, write_solution(folder, FAILS_HERE), config=fast_config)[0]
    assert trace.status.value == "RUNTIME_ERROR", trace.evaluation.log


OUT_OF_MEMORY_HERE = """
import torch


def run(x, y):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB (the other worker holds the rest)")
"""


def test_a_reference_out_of_memory_while_judging_is_not_an_invalid_reference(tmp_path, fast_config):
    # the machine's memory, not the problem: INVALID_REFERENCE would tell the user the problem is broken (and
    # would be a way for a solution that hogs the GPU to turn its own failure into the problem's)
    folder = write_problem(tmp_path / "problems", sizes=(64,), reference=OUT_OF_MEMORY_HERE)
    trace = api.evaluate(folder, write_solution(folder, GOOD), config=fast_config)[0]
    assert trace.status.value == "RUNTIME_ERROR", trace.evaluation.log
    assert "ran out of memory while the reference judged" in trace.evaluation.log
    broken = write_problem(tmp_path / "broken", sizes=(64,), reference=FAILS_HERE)
    assert api.evaluate(broken, write_solution(broken, GOOD), config=fast_config)[0].status.value == "INVALID_REFERENCE"
