"""`--model Qwen/Qwen3`: a name that begins known ids at a word boundary extracts that family."""

from __future__ import annotations

import json

import pytest

from solbench.extract import configs
from solbench.extract.pipeline import extract_model
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


def test_family_cli_writes_shared_problems_once(tmp_path, monkeypatch):
    """Qwen/Qwen3-VL: four VL models (dense and MoE text decoders) whose attention kernels coincide."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out, refs = tmp_path / "defs", tmp_path / "refs"
    members = configs.select("Qwen/Qwen3-VL").model_ids
    result = solbench("extract", "--model", "Qwen/Qwen3-VL", "--no-validate", "-o", str(out), "--references", str(refs))
    assert result.returncode == 0, result.stderr
    err = " ".join(result.stderr.split())  # rich wraps long lines
    assert f"Qwen/Qwen3-VL: a family of {len(members)} known models" in err
    per_model = {m: {d.name for d in extract_model(m, use_hub=False, validate=False).drafts} for m in members}
    for number, model_id in enumerate(members, 1):
        assert f"[{number}/{len(members)}] {model_id}: {len(per_model[model_id])} problems" in err
    union = set().union(*per_model.values())
    shared = {name for name in union if sum(name in names for names in per_model.values()) > 1}
    assert len(union) < sum(len(names) for names in per_model.values()) and shared
    assert {p.name for p in (out / "problem_defs" / "hf").iterdir()} == union
    assert (f"{len(union)} problems, {len(shared)} shared by several models (each written once): "
            f"{len(union)} written, 0 unchanged in {out / 'problem_defs' / 'hf'} and {refs / 'hf'}") in err
    for name in shared:
        recorded = json.loads((out / "problem_defs" / "hf" / name / "definition.json").read_text())["solbench"]["models"]
        assert sorted(m["hf_id"] for m in recorded) == sorted(m for m, names in per_model.items() if name in names)
    # dense and MoE text decoders both contributed
    assert "swiglu_mlp_h4096_i12288" in union and "moe_experts_swiglu_e128_k8_h2048_i768" in union


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
