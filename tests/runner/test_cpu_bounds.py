"""A CPU run shows each workload's bound on a GPU (for scale) and says why it is not scored."""

from __future__ import annotations

import json

from solbench.api import evaluate
from solbench.sol.analyser import analyse, sol_time_ms
from solbench.sol.hardware import load_spec
from solbench.spec.problem import load_problem
from tests.runner.conftest import write_problem


def test_cpu_run_records_the_target_gpus_bound_unscored(tmp_path, fast_config):
    """No GPU and no --hw: T_SOL is the problem's target GPU's bound (B200 when it declares none), the CPU
    latency is kept but given no score, and the record says why."""
    folder = write_problem(tmp_path, sizes=(4096,))
    traces = evaluate(folder, config=fast_config)
    sol = traces[0].evaluation.sol
    assert traces[0].evaluation.status.value == "PASSED", traces[0].evaluation.log
    problem = load_problem(folder)
    expected = sol_time_ms(analyse(problem.definition, problem.workloads[0].axes), load_spec("B200")).t_sol_ms
    assert sol["hw"] == load_spec("B200").name and sol["t_sol_ms"] == expected > 0
    assert sol["score"] is None and sol["log_score"] is None and sol["sol_fraction"] is None
    assert sol["latency_ms"] == traces[0].evaluation.performance.latency_ms
    assert "not scored" in sol["unscored"]


def test_cpu_run_uses_the_solutions_target_hardware(tmp_path, fast_config):
    """The official solutions declare their GPU (B200); a label without a spec ("LOCAL") is passed over."""
    folder = write_problem(tmp_path, sizes=(4096,))
    solution = tmp_path / "solution.json"
    solution.write_text(json.dumps({
        "name": "torch_axpy", "definition": "axpy_fp32", "author": "test",
        "spec": {"languages": ["pytorch"], "entry_point": "main.py::run", "target_hardware": ["LOCAL", "H100"],
                 "destination_passing_style": False},
        "sources": [{"path": "main.py", "content": "def run(x, y):\n    return x * 2.0 + y\n"}]}))
    trace = evaluate(folder, solution, config=fast_config)[0]
    sol = trace.evaluation.sol
    assert trace.evaluation.status.value == "PASSED", trace.evaluation.log
    assert sol["hw"] == load_spec("H100").name and sol["unscored"] and sol["score"] is None
