"""A broadcast (stride-0) output writes only its distinct values. Judged by value like any output; where
the reference writes densely the trace is flagged `output_broadcast_view` (the speed-of-light bound still
counts the bytes the reference's outputs hold, so a view that saves the writes can be faster than light)."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from solbench import api
from solbench.check.outputs import broadcast_outputs
from solbench.orchestrator.config import RunConfig
from solbench.spec.definition import Definition

DENSE = "def run(x):\n    return (2.0 * x)[:, None].expand(-1, 16).contiguous()\n"
VIEW = "def run(x):\n    return (2.0 * x)[:, None].expand(-1, 16)\n"


def write(tmp_path, reference: str):
    folder = tmp_path / "repeat_rows"
    folder.mkdir()
    definition = {"name": "repeat_rows", "axes": {"n": {"type": "var"}, "r": {"type": "const", "value": 16}},
                  "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
                  "outputs": {"out": {"shape": ["n", "r"], "dtype": "float32"}}, "reference": reference}
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text(json.dumps({"uuid": "w0", "axes": {"n": 64}, "inputs": {"x": {"type": "random"}},
                                                       "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5}}) + "\n")
    return folder


def solution(folder, body: str):
    path = folder / "solution.py"
    path.write_text("# solbench: problem=repeat_rows\n" + textwrap.dedent(body))
    return path


@pytest.fixture(scope="module")
def evaluator():
    """Workers kept for the module's four runs (a fresh process for each solution all the same): one reference
    worker started instead of four, and each solution's worker started while the one before runs."""
    with api.Evaluator(config=RunConfig(device="cpu", trials=1, warmup=1, iters=2, adaptive=False)) as kept:
        yield kept


def test_broadcast_outputs_are_named():
    definition = Definition.from_dict({"name": "d", "axes": {"n": {"type": "var"}},
                                       "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
                                       "outputs": {"a": {"shape": ["n", "n"], "dtype": "float32"},
                                                   "b": {"shape": ["n", "n"], "dtype": "float32"}},
                                       "reference": "def run(x):\n    return x, x\n"})
    x = torch.ones(4)
    assert broadcast_outputs([x[:, None].expand(4, 4), torch.ones(4, 4)], definition) == ["a (broadcast view)"]
    assert broadcast_outputs([torch.ones(4, 4), x[None].expand(1, 4).expand(4, 4)], definition) == ["b (broadcast view)"]


def test_a_broadcast_view_where_the_reference_writes_densely_is_judged_by_value_and_flagged(tmp_path, evaluator):
    folder = write(tmp_path, DENSE)
    trace = evaluator.evaluate(folder, solution(folder, VIEW))[0]
    assert trace.status.value == "PASSED", trace.evaluation.log
    assert "output_broadcast_view" in trace.evaluation.performance.latency.flags
    assert any("output_broadcast_view" in w and "broadcast view" in w for w in trace.evaluation.warnings)
    wrong = evaluator.evaluate(folder, solution(folder, "def run(x):\n    return x[:, None].expand(-1, 16)\n"))[0]
    assert wrong.status.value == "INCORRECT_NUMERICAL", wrong.evaluation.log


def test_a_broadcast_view_like_the_references_passes(tmp_path, evaluator):
    folder = write(tmp_path, VIEW)
    trace = evaluator.evaluate(folder, solution(folder, VIEW))[0]
    assert trace.status.value == "PASSED", trace.evaluation.log
    dense = evaluator.evaluate(folder, solution(folder, DENSE))[0]
    assert dense.status.value == "PASSED", dense.evaluation.log
