"""The four classes of shared problems issue 16 fixed, each against a count derived by hand from the
workload's axes (never a copied value). Skipped cleanly without the shared data."""

from __future__ import annotations

from solbench.sol.analyser import analyse_workload
from tests.sol.conftest import shared_problem

_problem = shared_problem


def test_paged_kv_pool_charged_at_the_pages_read(sol_execbench_dir):
    """GQA paged decode: the KV pool is read only at the pages kv_indices names, not whole."""
    problem = _problem(sol_execbench_dir, "FlashInfer-Bench/012_gqa_paged_decode_*")
    # a workload whose pool is much bigger than what it reads
    w = max(problem.workloads, key=lambda w: w.axes["num_pages"] / w.axes["num_kv_indices"])
    ax = problem.definition.resolve_axes(w.axes)
    assert ax["num_pages"] > 2 * ax["num_kv_indices"]
    b, hq, hkv, d, ps = ax["batch_size"], ax["num_qo_heads"], ax["num_kv_heads"], ax["head_dim"], ax["page_size"]
    kv_rows = min(ax["num_kv_indices"], ax["num_pages"]) * ps * hkv * d * 2  # bf16
    q_and_out = 2 * b * hq * d * 2
    lse = b * hq * 4
    index_lists = (ax["len_indptr"] + ax["num_kv_indices"]) * 4  # int32
    cost = analyse_workload(problem.definition, w, convention="strict")
    assert cost.bytes_by_tensor["k_cache"] == cost.bytes_by_tensor["v_cache"] == kv_rows
    assert cost.bytes_min == kv_rows * 2 + q_and_out + lse + index_lists
    assert any("pages read" in n for n in cost.notes)


def test_one_hot_moe_routing_is_balanced(sol_execbench_dir):
    """L2/008: every (token, slot) pair is routed once, spread evenly; no expert runs every token."""
    problem = _problem(sol_execbench_dir, "L2/008_moe_sparse_routing_and_dispatch")
    w = problem.workloads[0]
    ax = problem.definition.resolve_axes(w.axes)
    n = ax["batch_size"] * ax["seq_len"]
    h, e, k, i = ax["hidden_size"], ax["num_experts"], ax["num_experts_per_tok"], ax["intermediate_size"]
    router = 2 * n * h * e
    experts = 3 * 2 * (n * k) * h * i  # gate, up, down over the n*k routed rows in total
    for convention in ("strict", "solar"):
        cost = analyse_workload(problem.definition, w, convention=convention)
        assert cost.flops_matmul_total == router + experts, convention
    assert cost.method == "meta-approx" and any("balanced routing" in n for n in cost.notes)


def test_one_hot_guard_decided_by_the_rule(sol_execbench_dir):
    """L2/009 guards each expert with `mask[e].sum() > 0`: decided True for experts that get rows."""
    problem = _problem(sol_execbench_dir, "L2/009_decoder_layer_with_residual_connections")
    w = problem.workloads[0]
    ax = problem.definition.resolve_axes(w.axes)
    n = ax["batch_size"] * ax["seq_len"]
    h, k, i = ax["hidden_size"], ax["num_experts_per_tok"], ax["moe_intermediate_size"]
    cost = analyse_workload(problem.definition, w, convention="strict")
    experts = 3 * 2 * (n * k) * h * i
    # the expert MLPs are there (before: guard invented False, no expert ran) and counted once
    assert experts < cost.flops_matmul_total < experts * 2


def test_cu_seqlens_reference_traces_for_real(sol_execbench_dir):
    """L2/018 calls .tolist() on cu_seqlens: built from the sizes by its input generator, then traced."""
    problem = _problem(sol_execbench_dir, "L2/018_cu_seqlens_variable_length_vision_attention")
    w = problem.workloads[0]
    ax = problem.definition.resolve_axes(w.axes)
    t, s, e, hd, nh = ax["total_seq_len"], ax["num_sequences"], ax["embed_dim"], ax["head_dim"], ax["num_heads"]
    lengths = [t // s + (1 if j < t % s else 0) for j in range(s)] if s < t else [1] * t
    qkv, proj = 2 * t * e * 3 * e, 2 * t * e * e
    attention = sum(2 * 2 * ln * ln * hd * nh for ln in lengths)  # QK^T and PV per sequence
    cost = analyse_workload(problem.definition, w, convention="strict")
    assert cost.method == "meta"
    assert cost.flops_matmul_total == qkv + proj + attention


def test_nvfp4_matmul_at_logical_k(sol_execbench_dir):
    """Quant/008: the fp4 projection does 2 M N K with K the logical width (two values per byte)."""
    problem = _problem(sol_execbench_dir, "Quant/008_*")
    w = problem.workloads[0]
    ax = problem.definition.resolve_axes(w.axes)
    m = ax["batch_size"] * ax["num_vision_tokens"]
    flops = 2 * m * ax["hidden_size"] * (2 * ax["vision_hidden_size_half"])
    for convention in ("strict", "solar"):
        cost = analyse_workload(problem.definition, w, convention=convention)
        assert cost.flops_matmul == {"float4_e2m1fn_x2": flops}, convention


def test_one_hot_of_known_ids_counts_exactly(sol_execbench_dir):
    """L2/013: ids from the custom-input entrypoint are real; the one-hot mask (too big to compute) keeps
    their per-expert counts, so the expert loop is exact: N*k routed rows, plus the shared expert."""
    problem = _problem(sol_execbench_dir, "L2/013_expert_weighted_aggregation_with_shared_expert")
    w = problem.workloads[0]
    ax = problem.definition.resolve_axes(w.axes)
    n, h, k = ax["batch_seq_len"], ax["hidden_size"], ax["num_experts_per_tok"]
    routed = 3 * 2 * (n * k) * h * ax["moe_intermediate_size"]
    shared = 3 * 2 * n * h * ax["shared_expert_intermediate_size"] + 2 * n * h  # MLP and its 1-wide gate
    cost = analyse_workload(problem.definition, w, convention="strict")
    assert cost.method == "meta"
    assert cost.flops_matmul_total == routed + shared
