"""CPU timings at the default settings: short calls are interleaved in CPU_ROUNDS blocks per side (each with its
own judged output), long ones in one; a round too short for a CI of its own does not flag the workload."""

from __future__ import annotations

from solbench import api
from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.timed import CPU_INTERLEAVE_BELOW_S, CPU_ROUNDS
from tests.runner.conftest import write_problem, write_solution

SPIN = """
import time
import torch

def run(x, y):
    end = time.perf_counter() + {seconds}
    while time.perf_counter() < end:
        pass
    return x * 2.0 + y
"""


def evaluate(tmp_path, seconds: float, **timing):
    folder = write_problem(tmp_path / "problems", sizes=(64,))
    solution = write_solution(tmp_path, SPIN.format(seconds=seconds))
    config = RunConfig(device="cpu", trials=1, checked_timed_outputs=3, timeout_s=120, **timing)  # else the defaults
    (trace,) = api.evaluate(folder, solution, config=config)
    assert trace.status.value == "PASSED", trace.evaluation.log
    return trace.evaluation


def test_short_cpu_calls_are_timed_in_interleaved_rounds_each_judged(tmp_path):
    # 2 ms: far enough below CPU_INTERLEAVE_BELOW_S that a preempted trial on a busy machine still reads short;
    # a 30 ms budget leaves each of the 6 rounds 5 ms: its first 2 calls only, too few for a CI of its own
    evaluation = evaluate(tmp_path, 0.002, max_time_s=0.03)
    assert evaluation.correctness.checked_timed_iterations == CPU_ROUNDS  # one judged output per round
    latency = evaluation.performance.latency
    assert latency.n >= 2 * CPU_ROUNDS and "few_samples" not in latency.flags


def test_long_cpu_calls_keep_one_round(tmp_path):
    evaluation = evaluate(tmp_path, CPU_INTERLEAVE_BELOW_S * 1.5)
    assert evaluation.correctness.checked_timed_iterations == 3  # one block, all three judged outputs
