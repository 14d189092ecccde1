"""Shipped problems run unchanged through `solbench.api` with their reference as the solution (CPU)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

api = pytest.importorskip("solbench.api")

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "problem_defs" / "hf"
# Different families and kinds, all with CPU-sized first workloads and small weights.
SAMPLE = ["rmsnorm_h1024_eps1e-06", "mqa_attention_decode_h4_kv1_d256_sw512",
          "attention_block_prefill_hs1024_h16_kv8_d128_qknorm", "moe_router_topk_softmax_e32_k4_h2880",
          "patch_embedding_img224_p16_c3_h768"]


@pytest.mark.slow
def test_sample_passes_with_its_reference(tmp_path):
    for name in SAMPLE:
        shutil.copytree(PROBLEMS / name, tmp_path / name)
    traces = api.run_dataset(tmp_path, device="cpu", max_workloads=2, trials=1, iters=3, adaptive=False,
                             timing_rounds=1, timed_input_sets=1, checked_timed_outputs=1)
    by_problem: dict[str, list] = {}
    for trace in traces:
        by_problem.setdefault(trace.definition, []).append(trace.evaluation.status)
    assert sorted(by_problem) == sorted(SAMPLE)
    for name, statuses in by_problem.items():
        assert len(statuses) == 2, name
        assert all(s == api.Status.PASSED for s in statuses), (name, statuses)
