"""Generic capture end to end on small configs: every block is exported, emitted as code, validated bit for
bit against its module on CPU, and nothing is left out without a reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from solbench.extract.pipeline import extract_model
from tests.child_env import repo_env

FAST = ["--device", "cpu", "--trials", "1", "--iters", "2", "--warmup", "1", "--no-adaptive"]

WHISPER = {"model_type": "whisper", "d_model": 64, "encoder_layers": 1, "decoder_layers": 1,
           "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
           "decoder_ffn_dim": 128, "num_mel_bins": 16, "max_source_positions": 16,
           "max_target_positions": 64, "vocab_size": 51866}


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    path = tmp_path_factory.mktemp("whisper") / "config.json"
    path.write_text(json.dumps(WHISPER))
    return extract_model("test/whisper-tiny-config", path, use_hub=False)


def test_whisper_blocks_are_extracted_and_validated(whisper):
    names = {d.name.rsplit("_", 1)[0] for d in whisper.drafts}
    assert {"whisper_encoder_layer", "whisper_decoder_layer", "whisper_attention", "layer_norm"} <= names
    assert whisper.validations and all(v.passed for v in whisper.validations)
    assert all(v.exact == {"float32": True, "bfloat16": True} for v in whisper.validations)
    assert any("a torch.nn primitive" in line for line in whisper.left_out)  # by design: listed apart
    assert not whisper.not_emitted  # no gap: every block was emitted


def test_generic_reference_is_clean_and_has_dynamic_axes(whisper):
    layer = next(d for d in whisper.drafts if d.name.startswith("whisper_decoder_layer"))
    code = layer.reference()
    for leak in ("meta", "_assert_tensor_metadata", "torch.ops.aten"):
        assert leak not in code
    assert layer.axes["batch_size"][0] == "var" and layer.axes["seq_len"][0] == "var"
    assert len(layer.workload_points) > 3 and layer.workload_points[0] != layer.workload_points[1]


def test_generic_problems_pass_solbench_run(whisper, tmp_path):
    """Three written generic problems (encoder layer, cross-attention, layer norm) run with their own
    reference as the solution, in one `solbench run` over their folder."""
    from solbench.extract import emit

    wanted = ("whisper_encoder_layer", "layer_norm", "whisper_positional_embedding")
    chosen = [d for d in whisper.drafts if d.name.startswith(wanted)][:3]
    assert len(chosen) == 3
    emit.write(emit.merge([(whisper.config, chosen)]), tmp_path / "problems", tmp_path / "references")
    result = subprocess.run([sys.executable, "-m", "solbench", "run", str(tmp_path / "problems"),
                             "--max-workloads", "2", *FAST, "--json"], capture_output=True, text=True,
                            env=repo_env(Path(__file__).resolve().parents[2]), timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    traces = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    statuses = [t.get("evaluation", {}).get("status", t.get("status")) for t in traces]
    assert len(statuses) == 6 and set(statuses) == {"PASSED"}, result.stdout[-2000:]


def test_a_block_two_models_share_is_one_problem_naming_both(whisper, tmp_path):
    """Two configs that differ only in depth share their blocks: merged, each shared problem is one problem
    recording both models (its text names neither model nor how many of its modules share it)."""
    from solbench.extract import emit

    path = tmp_path / "config.json"
    path.write_text(json.dumps(WHISPER | {"encoder_layers": 2, "decoder_layers": 2}))
    deeper = extract_model("test/whisper-tiny-deeper", path, use_hub=False)
    problems = emit.merge([(whisper.config, whisper.drafts), (deeper.config, deeper.drafts)])
    shared = [p for p in problems.values() if len(p.models) == 2]
    assert shared and any(name.startswith("whisper_encoder_layer") for name in problems)
    assert all("test/whisper" not in p.draft.reference() for p in shared)


# a conformer transducer (Parakeet-TDT): mel frames of any length, an 8x subsampling, one decoder step
PARAKEET = {"model_type": "parakeet_tdt", "vocab_size": 33, "blank_token_id": 32, "decoder_hidden_size": 32,
            "num_decoder_layers": 1, "durations": [0, 1, 2],
            "encoder_config": {"model_type": "parakeet_encoder", "hidden_size": 32, "num_hidden_layers": 1,
                               "num_attention_heads": 2, "intermediate_size": 64, "conv_kernel_size": 3,
                               "subsampling_factor": 8, "subsampling_conv_channels": 8, "num_mel_bins": 16}}


@pytest.fixture(scope="module")
def parakeet(tmp_path_factory):
    pytest.importorskip("transformers.models.parakeet")
    path = tmp_path_factory.mktemp("parakeet") / "config.json"
    path.write_text(json.dumps(PARAKEET))
    return extract_model("test/parakeet-tdt-tiny-config", path, use_hub=False)


def test_a_conformer_transducer_takes_mel_frames_of_any_length(parakeet):
    result = parakeet
    names = {d.name.rsplit("_", 1)[0] for d in result.drafts}
    assert {"parakeet_encoder_block", "parakeet_encoder_attention", "parakeet_tdt_joint_network"} <= names
    assert result.validations and all(v.passed for v in result.validations)
    block = next(d for d in result.drafts if d.name.startswith("parakeet_encoder_block"))
    assert block.axes["seq_len_x1_div4_minus1"][0] == "var"  # its relative positions: 2 x frames / 8 - 1
    real = [p for p in block.workload_points if p["seq_len_x1_div8"] > 20]
    assert sorted({p["seq_len_x1_div8"] for p in real}) == [125, 375, 750]  # 10, 30, 60 s after 8x subsampling
    assert all(p["seq_len_x1_div4_minus1"] == 2 * p["seq_len_x1_div8"] - 1 for p in real)


def test_a_model_built_from_parts_extracts_each_part_and_reports_one_that_fails(parakeet, tmp_path):
    """canary-qwen's shape: a FastConformer encoder and a decoder LLM, neither library defines the whole. Its
    encoder built alone (`layers.0`) gives the very problems Parakeet-TDT's (`encoder.layers.0`) does: no
    model path in a problem's text, so one block reached from two models is one problem."""
    from tests.extract.test_past_templates import QWEN3

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"library": "parts", "components": {
        "encoder": {"config": PARAKEET["encoder_config"]}, "llm": {"config": QWEN3},
        "vocoder": {"model": "no-such/model"}}}))
    result = extract_model("test/speech-llm-parts", path, use_hub=False)
    names = {d.name.rsplit("_", 1)[0] for d in result.drafts}
    assert "parakeet_encoder_block" in names  # the encoder, generic
    assert any(n.startswith("decoder_layer_prefill") for n in names)  # the LLM, by the family templates
    assert result.validations and all(v.passed for v in result.validations)
    assert any(line.startswith("vocoder (no-such/model)") for line in result.skipped)
    conformer = {d.name for d in result.drafts if d.name.startswith("parakeet_encoder_")}
    assert conformer and conformer <= {d.name for d in parakeet.drafts}


def test_validation_draws_only_the_inputs_the_module_is_called_with(whisper):
    """The module's copy holds the weights: drawing them again from `get_inputs` at every size was as costly as
    the comparison. The cut recipe draws the kept inputs alone, with the full recipe's shapes and dtypes."""
    import torch

    from solbench.extract.generic_check import DRAW_KEPT
    from solbench.extract.workloads import axis_values

    layer = next(d for d in whisper.drafts if d.name.startswith("whisper_decoder_layer"))
    weights = {a.name for a in layer.inputs if a.init == "weight"}
    kept = {a.name for a in layer.inputs} - weights
    assert weights and kept
    namespace: dict = {}
    exec(layer.reference(), namespace)
    exec(layer.get_inputs_source(kept, DRAW_KEPT), namespace)
    axes = axis_values(layer, layer.capture_points[1])
    full, cut = namespace["get_inputs"](axes, "cpu"), namespace[DRAW_KEPT](axes, "cpu")
    assert set(cut) == kept and set(full) == kept | weights
    assert all(cut[n].shape == full[n].shape and cut[n].dtype == full[n].dtype for n in kept)
    torch.manual_seed(3)
    first = namespace[DRAW_KEPT](axes, "cpu")
    torch.manual_seed(3)
    again = namespace[DRAW_KEPT](axes, "cpu")
    assert all(torch.equal(first[n], again[n]) for n in kept)  # seeded: repeatable
