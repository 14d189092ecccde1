"""Problems shared across models are written once; a name cannot mean two computations."""

from __future__ import annotations

import json

import pytest

from solbench.extract import emit
from solbench.extract.pipeline import extract_model
from solbench.spec.errors import SpecError


@pytest.fixture(scope="module")
def llama_and_mistral():
    return [extract_model(m, use_hub=False, validate=False) for m in ("meta-llama/Llama-3.1-8B", "mistralai/Mistral-7B-v0.3")]


def test_identical_problems_are_shared(llama_and_mistral, tmp_path):
    problems = emit.merge([(r.config, r.drafts) for r in llama_and_mistral])
    shared = problems["swiglu_mlp_h4096_i14336"]
    assert sorted(shared.models) == ["meta-llama/Llama-3.1-8B", "mistralai/Mistral-7B-v0.3"]
    assert "attention_block_prefill_hs4096_h32_kv8_d128" in problems  # same block in both models
    assert "embedding_v128256_h4096" in problems and "embedding_v32768_h4096" in problems  # vocabularies differ
    emit.write(problems, tmp_path / "p", tmp_path / "r")
    meta = json.loads((tmp_path / "p" / "hf" / "swiglu_mlp_h4096_i14336" / "definition.json").read_text())
    assert meta["hf_id"] == "meta-llama/Llama-3.1-8B"
    assert [m["hf_id"] for m in meta["solbench"]["models"]] == sorted(shared.models)


def test_single_model_run_keeps_models_recorded_earlier(llama_and_mistral, tmp_path):
    both = emit.merge([(r.config, r.drafts) for r in llama_and_mistral])
    emit.write(both, tmp_path / "p", tmp_path / "r")
    only = emit.merge([(llama_and_mistral[1].config, llama_and_mistral[1].drafts)])
    emit.write(only, tmp_path / "p", tmp_path / "r")
    meta = json.loads((tmp_path / "p" / "hf" / "swiglu_mlp_h4096_i14336" / "definition.json").read_text())
    assert len(meta["solbench"]["models"]) == 2


def test_same_name_different_definition_is_refused(llama_and_mistral):
    llama, mistral = llama_and_mistral
    clash = next(d for d in mistral.drafts if d.name == "swiglu_mlp_h4096_i14336")
    altered = type(clash)(**{**clash.__dict__, "code": clash.code.replace("F.silu", "F.gelu")})
    with pytest.raises(SpecError, match="differs between models"):
        emit.merge([(llama.config, llama.drafts), (mistral.config, [altered])])


def test_a_newer_library_version_alone_is_no_drift():
    """CI installs the newest transformers: provenance naming versions may differ, the problem may not."""
    import json

    from solbench.extract.emit import same_extraction

    shipped = {"name": "p", "axes": {"n": {"type": "var"}}, "solbench": {"transformers_version": "5.23.0", "models": []}}
    newer = json.loads(json.dumps(shipped))
    newer["solbench"]["transformers_version"] = "5.24.0"
    assert same_extraction(json.dumps(shipped), json.dumps(newer))
    newer["axes"]["n"]["type"] = "const"
    assert not same_extraction(json.dumps(shipped), json.dumps(newer))
    assert not same_extraction("def run(x):\n    return x\n", "def run(x):\n    return x + 1\n")


def test_check_without_a_model_re_extracts_the_models_the_problems_on_disk_came_from(tmp_path):
    """`extract --check` with no --model checks the shipped set, not every model models.json knows."""
    from solbench.extract.emit import SUBDIR, models_on_disk

    for name, models in (("a", ["org/one", "org/two"]), ("b", ["org/two", "org/three"])):
        folder = tmp_path / SUBDIR / name
        folder.mkdir(parents=True)
        record = {"name": name, "solbench": {"models": [{"hf_id": m, "config_sha256": "x"} for m in models]}}
        (folder / "definition.json").write_text(json.dumps(record))
    (tmp_path / SUBDIR / "c").mkdir()
    (tmp_path / SUBDIR / "c" / "definition.json").write_text("{not json")
    assert models_on_disk(tmp_path) == ["org/one", "org/two", "org/three"]
def test_expression_axes_in_any_order_and_a_bad_problem_is_skipped(llama_and_mistral, tmp_path):
    import copy
    import dataclasses

    from solbench.extract import workloads

    good = copy.deepcopy(llama_and_mistral[0].drafts[0])
    generic = dataclasses.replace(good, name="generic_exprs", axes={  # dim_1 uses dim_0, listed before it
        "dim_1": ("expr", "dim_0 + 1", "derived"), "dim_0": ("expr", "2 * n", "derived"), "n": ("var", "n")})
    assert workloads.axis_values(generic, {"n": 3}) == {"n": 3, "dim_0": 6, "dim_1": 7}
    broken = dataclasses.replace(good, name="broken", axes={"dim_0": ("expr", "2 * missing", "derived")},
                                 workload_points=[{"n": k} for k in range(1, 10)])  # the 9th is sized
    problems = emit.merge([(llama_and_mistral[0].config, [good, broken])])
    skipped = []
    written = emit.write(problems, tmp_path / "p", tmp_path / "r", on_skip=lambda n, why: skipped.append((n, why)))
    assert [n for n, _ in skipped] == ["broken"] and "missing" in skipped[0][1]
    assert (tmp_path / "p" / "hf" / good.name / "definition.json") in written.paths
    assert written.written == [good.name] and written.unchanged == []
    assert not (tmp_path / "p" / "hf" / "broken").exists()
