from __future__ import annotations

import json

import pytest

from solbench.extract import configs
from solbench.spec.errors import SpecError


def test_shipped_models_cover_the_required_families():
    families = {entry["family"] for entry in configs.shipped_models().values()}
    assert len(configs.known_model_ids()) >= 20
    for family in ("Qwen3", "Qwen3-MoE", "Llama 3.x", "Mistral", "Mixtral", "Gemma 3", "DeepSeek-V3", "Phi",
                   "gpt-oss", "ViT"):
        assert family in families


def test_shipped_config_resolves_and_hash_is_stable():
    a = configs.resolve("Qwen/Qwen3-8B", use_hub=False)
    b = configs.resolve("Qwen/Qwen3-8B", use_hub=False)
    assert a.source == "shipped"
    assert a.facts["hidden_size"] == 4096 and a.facts["intermediate_size"] == 12288
    assert a.config_hash == b.config_hash and len(a.config_hash) == 16


def test_config_file_wins_and_drops_checkpoint_keys(tmp_path):
    path = tmp_path / "config.json"
    facts = dict(configs.shipped_models()["Qwen/Qwen3-8B"]["config"], torch_dtype="bfloat16",
                 transformers_version="4.51.0")
    path.write_text(json.dumps(facts))
    cfg = configs.resolve("my/model", path)
    assert cfg.source.startswith("file:")
    assert "torch_dtype" not in cfg.facts and "transformers_version" not in cfg.facts
    # same architecture, same hash, whatever the checkpoint-only keys say
    assert cfg.config_hash == configs.resolve("Qwen/Qwen3-8B", use_hub=False).config_hash


def test_multimodal_config_is_kept_whole_and_traced_by_its_text_part(tmp_path):
    from solbench.extract.trace import text_part

    text = {"hidden_size": 64, "num_hidden_layers": 2, "torch_dtype": "bfloat16"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gemma3", "text_config": text, "vision_config": {"hidden_size": 32}}))
    cfg = configs.resolve("x/y", path)
    assert cfg.model_type == "gemma3" and cfg.facts["vision_config"] == {"hidden_size": 32}
    assert "torch_dtype" not in cfg.facts["text_config"]  # checkpoint keys go from sub-configs too
    decoder = text_part(cfg)
    assert decoder.model_type == "gemma3_text" and decoder.facts["hidden_size"] == 64
    assert text_part(configs.resolve("Qwen/Qwen3-8B", use_hub=False)).facts["hidden_size"] == 4096


def test_unknown_model_offline_lists_known_models(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SpecError) as info:
        configs.resolve("nobody/no-such-model-xyz")
    message = str(info.value)
    assert "--config" in message and "Qwen/Qwen3-8B" in message


def test_bad_config_file_is_a_clear_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        configs.resolve("x/y", path)
    path.write_text("{}")
    with pytest.raises(SpecError, match="model_type"):
        configs.resolve("x/y", path)
