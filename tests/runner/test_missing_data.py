"""A workload whose blob is missing ends MISSING_DATA (the reference worker confirms the solution's
worker's report), not a failure charged to the solution."""

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
