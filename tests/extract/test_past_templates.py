"""What the generic capture adds past a templated model's templates (CPU).

With `backward`, its attention and decoder layers are also captured generically, for their backward only: the
templates' attention backward starts after the projections, the q/k norms and RoPE, and they have none of a
whole layer, where the official dataset's backward problems start at the module. With `rope_inside`, the
same blocks fused with the rotary module that feeds them: positions in, the cos/sin table computed inside."""

from __future__ import annotations

import json

import pytest

from solbench.extract import pipeline

QWEN3 = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96, "vocab_size": 128}


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3") / "config.json"
    path.write_text(json.dumps(QWEN3))
    return pipeline.extract_model("tiny/qwen3-backward", path, use_hub=False, backward=True, rope_inside=True)


def _generic(draft) -> bool:
    """A generic capture's problem: named `<module class>_<10 hex digits>`; the templates' are not."""
    stem, _, digest = draft.name.rpartition("_")
    return len(digest) == 10 and all(c in "0123456789abcdef" for c in digest) and bool(stem)


def test_only_the_backward_of_covered_attention_layers_and_rotary_table_is_added(extracted):
    generic = sorted(d.op_type for d in extracted.drafts if _generic(d) and "rope_inside" not in d.op_type)
    assert generic == ["qwen3_attention_backward", "qwen3_decoder_layer_backward",
                       "qwen3_rotary_embedding_backward"], generic
    templates = {d.op_type for d in extracted.drafts if not _generic(d)}
    assert {"attention_block", "decoder_layer", "attention_backward"} <= templates, templates  # still theirs
    assert not extracted.failed, [(v.problem, v.message) for v in extracted.failed]


def test_the_attention_backward_starts_at_the_module(extracted):
    with_backward = extracted
    attention = next(d for d in with_backward.drafts if d.op_type == "qwen3_attention_backward")
    names = [a.name for a in attention.inputs]
    assert names[0] == "grad_output" and "hidden_states" in names and "q_proj_weight" in names
    assert {"q_norm_weight", "k_norm_weight"} <= set(names)  # the q/k norms are inside
    assert "grad_hidden_states" in [a.name for a in attention.outputs]
    assert "torch.cat" in attention.code and "torch.neg" in attention.code  # RoPE's rotate_half is inside
    # a traced `view` is written `reshape`: legal on the bf16 trace's copies, it failed on a strided float32
    # tensor (Gemma 3's attention backward)
    assert ".view(" not in attention.code and ".reshape(" in attention.code
    assert "not written" in attention.hints["backward_of"]


def test_the_layer_backward_validated_against_autograd(extracted):
    with_backward = extracted
    layer = next(d for d in with_backward.drafts if d.op_type == "qwen3_decoder_layer_backward")
    check = next(v for v in with_backward.validations if v.problem == layer.name)
    assert check.passed and check.exact.get("bfloat16"), check.message
    assert check.max_abs_error["float32"] <= 1e-6


def test_the_covered_forwards_are_reported_as_captured_for_their_backward(extracted):
    with_backward = extracted
    lines = [line for line in with_backward.left_out
             if line.startswith(("Qwen3Attention", "Qwen3DecoderLayer", "Qwen3RotaryEmbedding"))]
    assert len(lines) == 3 and all("captured only for its backward" in line for line in lines), lines


def test_a_vl_models_text_layers_export_without_a_kv_cache(tmp_path):
    """Qwen3-VL keeps `use_cache` in its text config: the call must still turn the cache off, or the
    attention writes into a DynamicCache and export fails ("a fake tensor in the constant's list")."""
    from tests.extract.test_template_fixes import CONFIGS

    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["qwen3_vl"]))
    result = pipeline.extract_model("tiny/qwen3_vl-backward", path, use_hub=False, backward=True)
    kinds = sorted(d.op_type for d in result.drafts if d.op_type.startswith("qwen3vl_text_") and "backward" in d.op_type)
    assert kinds == ["qwen3vl_text_attention_backward", "qwen3vl_text_decoder_layer_backward",
                     "qwen3vl_text_rotary_embedding_backward"], [s for s in result.skipped if "backward" in s]


def test_a_backward_two_blocks_share_is_written_once_with_both_paths():
    """Gemma 3's sliding and full attention differ only in their mask (an input): one backward, both paths; the
    forward's hints (whose path list the backward's copied) are left alone."""
    from solbench.extract.blocks import BlocksResult, _add_backward
    from solbench.extract.draft import Draft

    def draft(paths):
        return Draft("attn_backward_0123456789", "attn_backward", "", {}, [], [], "def run():\n    pass\n", "",
                     hints={"module_paths": paths})

    forward_paths = ["model.layers.0.self_attn"]
    result = BlocksResult()
    _add_backward(result, draft(forward_paths))
    _add_backward(result, draft(["model.layers.5.self_attn"]))
    assert len(result.drafts) == 1
    assert result.drafts[0].hints["module_paths"] == ["model.layers.0.self_attn", "model.layers.5.self_attn"]
    assert forward_paths == ["model.layers.0.self_attn"]


def test_rope_inside_takes_positions_and_computes_the_table(extracted):
    fused = {d.op_type: d for d in extracted.drafts if "rope_inside" in d.op_type}
    assert sorted(fused) == ["qwen3_attention_with_rope_inside", "qwen3_attention_with_rope_inside_backward",
                             "qwen3_decoder_layer_with_rope_inside",
                             "qwen3_decoder_layer_with_rope_inside_backward"], sorted(fused)
    for op_type in ("qwen3_attention_with_rope_inside", "qwen3_decoder_layer_with_rope_inside"):
        draft = fused[op_type]
        inputs = {a.name: a for a in draft.inputs}
        assert not any(name.startswith("position_embeddings") for name in inputs), list(inputs)  # no cos/sin
        assert inputs["position_ids"].init == "token_ids" and inputs["position_ids"].high == "max_positions"
        assert inputs["rotary_emb_inv_freq"].init == "inv_freq"
        assert draft.axes["max_positions"] == ("const", 32768, "Largest position")  # the config default
        assert "torch.cos(" in draft.code and "torch.sin(" in draft.code and "torch.neg(" in draft.code
        check = next(v for v in extracted.validations if v.problem == draft.name)
        assert check.passed and check.exact == {"float32": True, "bfloat16": True}, check.message
    # the templates' problems are still there, taking the table
    attention = next(d for d in extracted.drafts if d.op_type == "attention_block")
    assert {"cos", "sin"} <= {a.name for a in attention.inputs}


def test_rope_inside_inputs_are_positions_and_real_frequencies(extracted):
    """Zeros for positions would give cos 1 and sin 0: the rotation (and a kernel that skips it) unseen."""
    import torch

    draft = next(d for d in extracted.drafts if d.op_type == "qwen3_attention_with_rope_inside")
    namespace: dict = {}
    exec(compile(draft.reference(), "<reference>", "exec"), namespace)
    torch.manual_seed(0)
    inputs = namespace["get_inputs"]({"batch_size": 1, "seq_len": 64, "max_positions": 32768}, "cpu")
    assert inputs["position_ids"].unique().numel() > 32
    inv_freq = inputs["rotary_emb_inv_freq"]
    assert inv_freq[0] == 1.0 and torch.all(inv_freq[1:] < inv_freq[:-1])
    assert torch.allclose(inv_freq[1:] / inv_freq[:-1], inv_freq[1] / inv_freq[0])  # geometric, as RoPE's


def test_rope_inside_backward_differentiates_the_hidden_states(extracted):
    """The fused block's gradient flags are the block's, matched by input name (positions take none)."""
    backward = next(d for d in extracted.drafts if d.op_type == "qwen3_decoder_layer_with_rope_inside_backward")
    outputs = [a.name for a in backward.outputs]
    assert outputs[0] == "grad_hidden_states" and "grad_position_ids" not in outputs
    assert "grad_rotary_emb_inv_freq" not in outputs  # a buffer, fixed at init
    check = next(v for v in extracted.validations if v.problem == backward.name)
    assert check.passed and check.max_abs_error["float32"] <= 1e-6, check.message


def test_a_call_without_a_rotary_table_gives_no_fused_block():
    import torch
    from torch import nn

    from solbench.extract import rope_inside
    from solbench.extract.capture import Call
    from solbench.extract.generic import Block

    class Attention(nn.Module):
        def forward(self, hidden_states, position_embeddings=None):
            return hidden_states

    module = Attention()
    x, cos, sin = (torch.empty(1, 4, 8, device="meta") for _ in range(3))
    plain = Block("attn", "Attention", module, [Call((x,), {"position_embeddings": (cos, sin)})])
    assert rope_inside.blocks(module, [plain], [{"attn": plain.calls[0]}]) == []  # not a rotary module's output
    made = Call((x,), {})  # the rotary module's call
    whole = Call((x,), {"position_embeddings": (cos, sin)}, sources={1: ("rotary", 0, made), 2: ("rotary", 1, made)})
    assert rope_inside._table_argument(module, whole) == ("position_embeddings", "rotary", made)
    mixed = Call((x,), {"position_embeddings": (cos, sin)}, sources={1: ("rotary", 0, made)})  # sin from elsewhere
    assert rope_inside._table_argument(module, mixed) is None
    swapped = Call((x,), {"position_embeddings": (cos, sin)}, sources={1: ("rotary", 1, made), 2: ("rotary", 0, made)})
    assert rope_inside._table_argument(module, swapped) is None
    other = Call((x,), {})  # cos and sin from two calls of one rotary module (two layer types)
    split = Call((x,), {"position_embeddings": (cos, sin)}, sources={1: ("rotary", 0, made), 2: ("rotary", 1, other)})
    assert rope_inside._table_argument(module, split) is None


def test_each_layer_gets_the_table_its_own_rotary_call_made(tmp_path):
    """OLMo 3's one rotary module makes a table per layer type (its call takes the type): the fused sliding
    and full layers must each compute the table their layer was handed, from that call (CPU, no export)."""
    import torch

    from solbench.extract import build, capture, configs, partition, rope_inside

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "olmo3", "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
                                "vocab_size": 128, "sliding_window": 16,
                                "layer_types": ["sliding_attention", "full_attention"]}))
    config = configs.resolve("tiny/olmo3", path, use_hub=False)
    built = build.build_transformers(config.model_id, config.facts, config.family or "")
    calls = [capture.record_calls(built, point, torch.bfloat16) for point in capture.axis_points(built)]
    kinds, _ = partition.blocks(built.module, calls)
    fused = rope_inside.blocks(built.module, kinds, calls)
    by_path = {(b.path, b.op_type) for b in fused}
    assert by_path == {("model.layers.0", "olmo3_decoder_layer_with_rope_inside"),
                       ("model.layers.1", "olmo3_decoder_layer_with_rope_inside"),
                       ("model.layers.0.self_attn", "olmo3_attention_with_rope_inside"),
                       ("model.layers.1.self_attn", "olmo3_attention_with_rope_inside")}, by_path
    for block in fused:
        _, _, made = rope_inside._table_argument(block.inner.module, block.inner.calls[0])
        wanted = built.module.config.layer_types[int(block.path.split(".")[2])]
        assert wanted in made.args + tuple(made.kwargs.values()), (block.path, made)
        assert all("position_ids" in c.kwargs and "position_embeddings" not in c.kwargs for c in block.calls)


def test_a_routers_backward_is_captured_past_the_templates(tmp_path):
    """GLM's router (sigmoid scores, grouped top-k, weights divided in place by their sum) is a template's
    forward; with `backward` its backward is captured from the module and matches autograd exactly. The
    router alone is the built model (its tokens are its call), so nothing else is captured."""
    import torch

    from solbench.extract import blocks, build, configs
    from solbench.extract.built import BuiltModel

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "glm4_moe", "hidden_size": 64, "num_hidden_layers": 2,
                                "first_k_dense_replace": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
                                "head_dim": 16, "intermediate_size": 96, "moe_intermediate_size": 32,
                                "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
                                "n_group": 1, "topk_group": 1, "vocab_size": 128}))
    config = configs.resolve("tiny/glm", path, use_hub=False)
    router = build.build_transformers(config.model_id, config.facts, config.family or "").module.model.layers[1].mlp.gate

    def make_call(axes, dtype):
        return (torch.randn(axes["tokens"], 64, dtype=dtype),), {}

    built = BuiltModel("tiny/glm-router", router, "transformers", make_call, {"tokens": (16, 24, 40)},
                       {"tokens": (128,)})
    result = blocks.extract_blocks(built, torch.bfloat16, backward=True, covered=lambda p: "a template's")
    assert [d.op_type for d in result.drafts] == ["glm4_moe_topk_router_backward"]  # the forward stays the template's
    router_backward = result.drafts[0]
    check = next(v for v in result.validations if v.problem == router_backward.name)
    assert check.passed and check.exact == {"float32": True, "bfloat16": True}, check.message
    assert "torch.scatter_add(" in router_backward.code  # the top-k gather's gradient


def test_backward_workloads_stop_where_one_tensor_outgrows_the_limit():
    """A math-path attention backward holds batch x heads x seq x seq scores: Qwen3-4B's layer at 8 x 4096
    tokens ran an H200 out of memory. Such sizes are left out of a backward problem's workloads."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from solbench.extract import backward

    def scores(q):  # q: [batch, 32 heads, seq, 128]
        return torch.softmax(q @ q.transpose(-1, -2), dim=-1) @ q

    graph = make_fx(scores, tracing_mode="symbolic")(torch.zeros(2, 32, 5, 128))
    shape = next(n for n in graph.graph.nodes if n.op == "placeholder").meta["val"].shape  # all symbolic here
    axis_of = {str(size.node.expr): axis for size, axis in zip(shape, ("batch_size", "heads", "seq_len", "dim"))}
    points = [{"batch_size": b, "heads": 32, "seq_len": s, "dim": 128} for b, s in ((1, 4096), (8, 4096), (8, 1024))]
    kept, dropped = backward.fitting_points(points, graph, axis_of)
    assert kept == [points[0], points[2]]  # 2 GiB and 128 MiB of scores in float32
    assert dropped == [(points[1], 8 * 32 * 4096 * 4096 * 4)]
    assert backward.left_out_note(dropped) == ("1 of the forward's sizes (batch_size 8 x heads 32 x seq_len 4096 x dim "
                                               "128): the reference makes a tensor of up to 16.0 GiB there (limit 4 GiB)")
