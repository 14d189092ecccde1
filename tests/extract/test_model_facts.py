"""Shipped model facts (extract/data/models.json): schema, sources, every config builds, families, reasons."""

from __future__ import annotations

import json

import pytest

from solbench.extract import configs
from solbench.spec.errors import SpecError

MODELS = configs.shipped_models()
KINDS = {"dense LLM", "MoE", "VL", "diffusion", "audio", "SSM", "vision"}
TRANSFORMERS = sorted(m for m, e in MODELS.items() if e.get("library", "transformers") == "transformers")


def test_every_entry_has_the_agreed_schema_and_a_source():
    for model_id, entry in MODELS.items():
        library = entry.get("library", "transformers")
        assert entry["family"] and entry["kind"] in KINDS, model_id
        assert library in {"transformers", "diffusers", "parts", "remote-code", "other"}, model_id
        assert len(entry["source"]) > 20, f"{model_id}: no source"
        if library in ("remote-code", "other"):
            assert entry["reason"].startswith(("remote code:", "another framework:")), model_id
            continue
        assert "reason" not in entry and entry["confidence"] in {"exact", "partial", "derived"}, model_id
        if library == "transformers":
            assert isinstance(entry["config"]["model_type"], str), model_id
        elif library == "parts":  # each part a shipped model or a transformers config
            for part in entry["components"].values():
                assert part.get("model") in MODELS or isinstance(part["config"]["model_type"], str), model_id
        else:
            assert entry["components"], model_id
            for component in entry["components"].values():  # a component is built, or is a shipped model
                assert set(component) == {"class", "config"} or (
                    set(component) == {"class", "library", "model"} and component["model"] in MODELS), model_id


def test_the_official_models_are_covered():
    """74 of the official dataset's models are defined by transformers or diffusers (plus 4 whose remote code
    transformers now defines, Parakeet-TDT which transformers 5.24 defines, and canary-qwen, built from its
    parts); the other 16 carry the reason."""
    libraries = [e.get("library", "transformers") for e in MODELS.values()]
    assert libraries.count("diffusers") >= 15
    assert libraries.count("transformers") >= 81 and libraries.count("parts") >= 1
    assert libraries.count("remote-code") + libraries.count("other") >= 16
    assert {e["kind"] for e in MODELS.values() if "reason" not in e} == KINDS


def test_every_transformers_config_builds():
    """AutoConfig.for_model accepts every shipped transformers config (building the models: tests marked slow)."""
    from transformers import AutoConfig

    for model_id in TRANSFORMERS:
        facts = dict(configs.resolve(model_id, use_hub=False).facts)
        AutoConfig.for_model(facts.pop("model_type"), **facts)


@pytest.mark.slow
def test_every_transformers_model_builds_on_meta():
    from solbench.extract.trace import hf_config, instantiate, text_part

    for model_id in TRANSFORMERS:
        decoder = text_part(configs.resolve(model_id, use_hub=False))
        assert sum(p.numel() for p in instantiate(hf_config(decoder), False).parameters()) > 0, model_id


def test_family_names_select_their_members():
    flux = configs.select("black-forest-labs/FLUX.1")
    assert flux.family and set(flux.model_ids) == {"black-forest-labs/FLUX.1-dev", "black-forest-labs/FLUX.1-Fill-dev",
                                                   "black-forest-labs/FLUX.1-Kontext-dev"}
    vl = configs.select("Qwen/Qwen3-VL")
    assert vl.family and {"Qwen/Qwen3-VL-4B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"} <= set(vl.model_ids)
    assert configs.select("qwen/qwen3-vl-8b-instruct").model_ids == ("Qwen/Qwen3-VL-8B-Instruct",)


def test_a_remote_code_model_names_its_reason():
    with pytest.raises(SpecError, match="remote code") as info:
        configs.resolve("inclusionAI/Ling-1T", use_hub=False)
    assert "\\n" not in str(info.value)
    assert configs.unbuildable_reason("myshell-ai/OpenVoice").startswith("another framework")


def test_a_diffusers_model_resolves_to_its_components():
    cfg = configs.resolve("black-forest-labs/FLUX.1-dev", use_hub=False)
    assert cfg.library == "diffusers" and cfg.kind == "diffusion"
    assert cfg.components["transformer"]["class"] == "FluxTransformer2DModel"
    assert len(cfg.config_hash) == 16 and cfg.config_hash != configs.resolve("briaai/FIBO", use_hub=False).config_hash


def test_an_unknown_architecture_in_a_config_file_is_one_clear_line(tmp_path):
    from solbench.extract.trace import trace

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "no_such_architecture", "hidden_size": 8}))
    with pytest.raises(SpecError, match="no_such_architecture") as info:
        trace(configs.resolve("me/odd", path))
    assert "\\n" not in str(info.value)


def test_all_takes_the_models_built_from_parts():
    """`--all` extracts what a library here builds: a parts model (canary-qwen) is built by transformers."""
    from solbench.extract import pipeline

    ids = pipeline.extractable_model_ids()
    assert "nvidia/canary-qwen-2.5b" in ids and "nvidia/parakeet-tdt-0.6b-v3" in ids
    assert "hexgrad/Kokoro-82M" not in ids
