"""The MoE templates spell routing and dispatch as transformers' own modules do (5.24: the experts find their
tokens through a one-hot mask of the selections, one class more than experts; the grouped router masks the
groups it did not pick with `~mask.bool()`). What that buys, on the shipped DeepSeek-V3 problems:

- the speed-of-light tracer follows the expert loop at every size (the one-hot rule of `solbench.sol.one_hot`);
  the `torch.unique(...).tolist()` loop the template wrote before could not be traced past 256 tokens, whose
  bound then fell back to the declared bytes with the FLOPs unknown;
- an official problem copied from those modules records the same operators (the one-hot mask, the inverted
  group mask), so `benchmarks/extract_coverage.py` finds it inside the extracted problem.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from solbench.sol.analyser import analyse_workload
from solbench.sol.op_set import record_op_sets
from solbench.spec.problem import load_problem

SHIPPED = Path(__file__).resolve().parents[2] / "problem_defs" / "hf"
EXPERTS = "moe_experts_swiglu_e256_k8_h7168_i2048_f32weights"
ROUTER = "moe_router_sigmoid_grouped_e256_k8_g8_tg4_h7168_renorm_scale2p5"


def _shipped(name: str):
    if not (SHIPPED / name).is_dir():
        pytest.skip(f"{name} is not in this checkout")
    return load_problem(SHIPPED / name)


def test_the_experts_loop_is_traced_at_every_workload():
    problem = _shipped(EXPERTS)
    largest = max(problem.workloads, key=lambda w: w.axes["num_tokens"])
    tokens, top_k, hidden, inter = largest.axes["num_tokens"], 8, 7168, 2048
    assert tokens > 256  # past the size the old loop could be traced at
    cost = analyse_workload(problem.definition, largest)
    assert cost.method == "meta-approx", cost.notes  # traced, routing assumed balanced (not declared-io)
    assert any("one_hot" in note for note in cost.notes), cost.notes
    # every (token, slot) pair runs one gate/up and one down projection; the balanced rule spreads the pairs
    # over one class more than experts (the modules' slot for a token routed nowhere), so a little less is
    # counted than routed: the bound stays a bound
    routed = 2 * tokens * top_k * (2 * inter * hidden + inter * hidden)
    matmul = sum(cost.flops_matmul.values())
    assert routed * 0.99 <= matmul <= routed, (matmul, routed)


def test_router_and_experts_record_the_modules_operators():
    experts = _shipped(EXPERTS)
    small = min(experts.workloads, key=lambda w: w.axes["num_tokens"])
    experts_ops = record_op_sets(experts.definition, small.axes, small.scalar_values()).data
    assert "one_hot" in experts_ops  # F.one_hot, recorded whole (solbench.sol.op_set.WHOLE)
    router = _shipped(ROUTER)
    small = min(router.workloads, key=lambda w: w.axes["num_tokens"])
    router_ops = record_op_sets(router.definition, small.axes, small.scalar_values()).data
    assert "bitwise_not" in router_ops  # the groups not picked: ~group_mask.bool()
