"""Generic references are valid at every workload they ship with, and captured at the dtypes real runs use.

Small configs, one block each (the rest of the model is marked covered): a Mamba2 mixer whose first export
baked a chunk count of 1 (it raised at 1024 tokens on a GPU), Qwen3-Next's gated delta rule (its export
branch computes another triangular inverse and unrolls its chunk loop once), and the fp32 parameters
diffusers and transformers keep when they load a model in bf16."""

from __future__ import annotations

import pytest
import torch

from solbench.extract import blocks, build, far_match, precision
from solbench.extract.workloads import axis_values

MAMBA2 = {"model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 1, "num_heads": 4, "head_dim": 32,
          "state_size": 16, "n_groups": 1, "expand": 2, "vocab_size": 128, "chunk_size": 256}
QWEN3_NEXT = {"model_type": "qwen3_next", "head_dim": 32, "hidden_size": 64, "intermediate_size": 128,
              "linear_conv_kernel_dim": 4, "linear_key_head_dim": 32, "linear_num_key_heads": 2,
              "linear_num_value_heads": 4, "linear_value_head_dim": 32, "moe_intermediate_size": 32,
              "num_attention_heads": 2, "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 4,
              "num_key_value_heads": 1, "shared_expert_intermediate_size": 32, "vocab_size": 128,
              "full_attention_interval": 4}


def _only(suffix: str):
    return lambda path: "" if path.endswith(suffix) else "covered elsewhere in this test"


def _runs_on_meta(draft, point: dict[str, int]) -> bool:
    """The reference at `point` on meta tensors returns the declared output shapes."""
    namespace: dict = {}
    exec(compile(draft.reference(), draft.name, "exec"), namespace)
    values = axis_values(draft, point)

    def shape(arg):
        return tuple(int(e) if e.isdigit() else values[e] for e in arg.shape)
    inputs = {a.name: torch.empty(shape(a), dtype=getattr(torch, a.dtype), device="meta") for a in draft.inputs}
    try:
        out = namespace["run"](**inputs)
    except RuntimeError:
        return False
    out = out if isinstance(out, tuple) else (out,)
    return [tuple(o.shape) for o in out] == [shape(a) for a in draft.outputs]


@pytest.fixture(scope="module")
def mamba2_mixer():
    built = build.build_transformers("test/mamba2-tiny", MAMBA2)
    built.workload_axes = {"batch_size": (1, 2), "seq_len": (128, 1024)}  # fewer workloads: a cheaper test
    confirmed: list[bool] = []
    real = far_match.same_operations

    def heard(*args):
        confirmed.append(real(*args))
        return confirmed[-1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(far_match, "same_operations", heard)
        result = blocks.extract_blocks(built, torch.bfloat16, covered=_only(".mixer"))
    return result, confirmed


def test_mamba2_reference_runs_at_every_workload(mamba2_mixer):
    """On main the export traced at 16 tokens baked one chunk of 256, and the reference raised past it.
    The static far trace (`far_match`) must not confirm that export: 5 chunks there, not 1."""
    mamba2_mixer, confirmed = mamba2_mixer
    assert confirmed == [False]
    (draft,) = mamba2_mixer.drafts
    assert all(v.exact == {"float32": True, "bfloat16": True} for v in mamba2_mixer.validations)
    lengths = {p["seq_len"] for p in draft.workload_points}
    assert {128, 1024} <= lengths  # the model's real sizes, past one chunk, are still emitted
    bad = [p for p in draft.workload_points if not _runs_on_meta(draft, p)]
    assert not bad, bad


def test_gated_delta_net_matches_its_module_and_keeps_only_sizes_it_is_valid_at():
    """The export branch of the gated delta rule (forward substitution) is not what eager runs compute; and
    its loop over 64-token chunks runs as often as the traced size has chunks, so longer workloads go."""
    built = build.build_transformers("test/qwen3-next-tiny", QWEN3_NEXT)
    built.workload_axes = {"batch_size": (1, 2), "seq_len": (80, 128)}  # traced again at 129 and 259 tokens
    result = blocks.extract_blocks(built, torch.bfloat16, covered=_only("layers.0.linear_attn"))
    (check,) = result.validations
    assert check.passed and check.exact == {"float32": True, "bfloat16": True}, check.message
    (draft,) = result.drafts
    assert "solve_triangular" in draft.code
    assert max(p["seq_len"] for p in draft.workload_points) <= 64
    assert any("workloads not emitted" in note and "grows with the size" in note for note in result.notes)


def test_library_dtype_rules_keep_fp32_weights():
    """diffusers keeps `_keep_in_fp32_modules` (parameters by name too: Wan's scale_shift_table) in fp32 in
    bf16; transformers keeps `_keep_in_fp32_modules_strict` (Nemotron-H's router) and its fp32-built buffers."""
    from solbench.extract.build_diffusers.meta_module import build_on_meta

    wan = build_on_meta("WanTransformer3DModel", {"num_attention_heads": 2, "attention_head_dim": 16,
                                                  "in_channels": 4, "out_channels": 4, "text_dim": 32,
                                                  "freq_dim": 16, "ffn_dim": 64, "num_layers": 1}, torch.bfloat16)
    precision.cast(wan, torch.bfloat16, "diffusers")  # what extract_blocks does to every model it captures
    dtypes = {name: p.dtype for name, p in wan.named_parameters()}
    assert dtypes["blocks.0.scale_shift_table"] == torch.float32
    assert dtypes["condition_embedder.time_embedder.linear_1.weight"] == torch.float32
    assert dtypes["blocks.0.attn1.to_q.weight"] == torch.bfloat16
    nemotron = build.build_transformers("test/nemotron-h-tiny", {
        "model_type": "nemotron_h", "hidden_size": 64, "num_hidden_layers": 2, "hybrid_override_pattern": "*E",
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "n_routed_experts": 4,
        "num_experts_per_tok": 2, "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 32,
        "vocab_size": 128, "n_group": 1, "topk_group": 1}).module
    precision.cast(nemotron, torch.bfloat16, "transformers")
    kept = {name for name, p in nemotron.named_parameters() if p.dtype == torch.float32}
    assert kept and all(name.endswith(("gate.weight", "e_score_correction_bias")) for name in kept), kept
    assert any(n.endswith("gate.weight") for n in kept)
    assert nemotron.get_input_embeddings().weight.dtype == torch.bfloat16
