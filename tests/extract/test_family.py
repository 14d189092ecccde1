"""`--model Qwen/Qwen3`: a name that begins known ids at a word boundary extracts that family."""

from __future__ import annotations

import json

import pytest

from solbench.extract import configs
from tests.test_cli import solbench

QWEN3 = ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B", "Qwen/Qwen3-32B",
         "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B"]


def test_qwen3_is_every_dense_and_moe_size():
    for spelling in ("Qwen/Qwen3", "qwen/qwen3", "Qwen/Qwen3-"):
        selection = configs.select(spelling)
        assert selection.family and set(QWEN3) <= set(selection.model_ids), spelling
        assert all(m.startswith("Qwen/Qwen3-") for m in selection.model_ids)  # and the official Qwen3 variants
    labels = {configs.shipped_models()[m]["family"] for m in QWEN3}
    assert labels == {"Qwen3", "Qwen3-MoE"}


def test_a_family_is_any_prefix_at_a_word_boundary():
    """Not a Qwen special case: every known id is reached from each of its boundary prefixes below the org."""
    known = configs.known_model_ids()
    for model_id in known:
        org_end = model_id.index("/") + 1
        for end in range(org_end + 1, len(model_id)):
            if model_id[end] not in "-_.":
                continue
            prefix = model_id[:end]
            if prefix in known:  # a known id is that model (deepseek-ai/DeepSeek-V3 vs -V3.1-Terminus)
                assert configs.select(prefix).model_ids == (prefix,)
                continue
            selection = configs.select(prefix)
            assert selection.family and model_id in selection.model_ids, prefix
            assert all(m.startswith(prefix) for m in selection.model_ids), prefix
    assert configs.select("meta-llama/Llama-3").model_ids == tuple(m for m in known if m.startswith("meta-llama/Llama-3"))
    assert configs.select("Qwen/Qwen3-8B") == configs.Selection("Qwen/Qwen3-8B", ("Qwen/Qwen3-8B",))


@pytest.mark.parametrize(("name", "meant"), [("Qwen/Qwe", ["Qwen/Qwen", "Qwen/Qwen2.5", "Qwen/Qwen3"]),
                                             ("deepseek-ai/DeepSeek-V", ["deepseek-ai/DeepSeek-V2", "deepseek-ai/DeepSeek-V3",
                                                                         "deepseek-ai/DeepSeek-V3.1"]),
                                             ("google", ["google/gemma", "google/vit"]),
                                             ("Qwen3", ["Qwen/Qwen3", "cybermotaz/Qwen3", "nvidia/Qwen3"]),
                                             ("Qwen/Qwen3-8", ["Qwen/Qwen3-8B"])])
def test_names_that_stop_mid_word_are_not_families(name, meant):
    selection = configs.select(name)
    assert not selection.family and selection.model_ids == (name,)
    assert configs.family_suggestions(name) == meant


def test_a_family_may_mix_architectures():
    """Qwen/Qwen3-VL holds dense and MoE text decoders; NousResearch/DeepHermes-3 a Llama 3 and a Mistral."""
    labels = {configs.shipped_models()[m]["family"] for m in configs.select("Qwen/Qwen3-VL").model_ids}
    assert labels == {"Qwen3-VL", "Qwen3-VL-MoE"}
    labels = {configs.shipped_models()[m]["family"] for m in configs.select("NousResearch/DeepHermes-3").model_ids}
    assert labels == {"Llama 3.x", "Mistral-Small"}


def test_family_cli_writes_shared_problems_once(tmp_path, monkeypatch):
    """NousResearch/DeepHermes-3: a Llama 3 and a Mistral Small whose attention kernels coincide (the CLI's
    family path is the same for any family; this one extracts in seconds where Qwen3-VL's four took 40-75 s
    of CI). Each model's problems are read back from what was written (every definition records the models
    that share it), so the CLI's per-model counts, the shared count and the records must all agree."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out, refs = tmp_path / "defs", tmp_path / "refs"
    family = "NousResearch/DeepHermes-3"
    members = configs.select(family).model_ids
    result = solbench("extract", "--model", family, "--no-validate", "-o", str(out), "--references", str(refs))
    assert result.returncode == 0, result.stderr
    err = " ".join(result.stderr.split())  # rich wraps long lines
    assert f"{family}: a family of {len(members)} known models" in err
    written = out / "problem_defs" / "hf"
    recorded = {p.name: [m["hf_id"] for m in json.loads((p / "definition.json").read_text())["solbench"]["models"]]
                for p in written.iterdir()}
    assert all(len(models) == len(set(models)) and set(models) <= set(members) for models in recorded.values())
    per_model = {m: {name for name, models in recorded.items() if m in models} for m in members}
    for number, model_id in enumerate(members, 1):
        assert per_model[model_id], model_id
        assert f"[{number}/{len(members)}] {model_id}: {len(per_model[model_id])} problems" in err
    shared = {name for name, models in recorded.items() if len(models) > 1}
    assert shared and len(recorded) < sum(len(names) for names in per_model.values())
    assert (f"{len(recorded)} problems, {len(shared)} shared by several models (each written once): "
            f"{len(recorded)} written, 0 unchanged in {written} and {refs / 'hf'}") in err
    assert {p.stem for p in (refs / "hf").glob("*.py")} >= set(recorded)
    # both architectures contributed: Llama 3 8B's MLP and Mistral Small's
    assert "swiglu_mlp_h4096_i14336" in recorded and "swiglu_mlp_h5120_i32768" in recorded
    assert {"gqa_attention_prefill_h32_kv8_d128", "gqa_attention_decode_h32_kv8_d128"} <= shared


def test_ambiguous_or_unknown_name_lists_known_models_and_exits_2(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name, hint in (("Qwen/Qwe", "did you mean Qwen/Qwen, Qwen/Qwen2.5, Qwen/Qwen3?"), ("nobody/nothing-here", "")):
        result = solbench("extract", "--model", name, "--no-validate", "-o", str(tmp_path / "defs"),
                          "--references", str(tmp_path / "refs"))
        assert result.returncode == 2, result.stderr
        err = " ".join(result.stderr.split())
        assert f"no config for '{name}'" in err and hint in err and "Traceback" not in err
        assert all(m in err for m in configs.buildable_model_ids())
    assert not (tmp_path / "defs").exists()


def test_config_file_cannot_stand_for_a_family(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(configs.shipped_models()["Qwen/Qwen3-8B"]["config"]))
    result = solbench("extract", "--model", "Qwen/Qwen3", "--config", str(path), "-o", str(tmp_path / "defs"))
    assert result.returncode == 2 and "--config needs exactly one --model" in result.stderr
