"""Several models at once (`--jobs`, forked processes) and reuse between models with the same facts."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pytest

from solbench.cli import extract as extract_cli
from solbench.extract import block_pool, parallel, pipeline, reuse
from solbench.spec.errors import SpecError


def _work(model_id: str):
    if model_id == "bad":
        raise SpecError("bad: no such model")
    if model_id == "dies":
        os._exit(3)
    if model_id == "hangs":
        time.sleep(120)
    return (model_id, os.getpid())


def test_results_come_back_in_order_with_failures_named():
    ids = ["a", "bad", "dies", "b", "c"]
    heard: list[int] = []
    outcomes = parallel.run_each(ids, _work, jobs=2, on_done=lambda index, outcome: heard.append(index))
    assert [o.model_id for o in outcomes] == ids and sorted(heard) == list(range(len(ids)))
    assert [o.result[0] for o in outcomes if o.result] == ["a", "b", "c"]
    assert outcomes[1].bad_input and outcomes[1].error == "bad: no such model"
    assert "died (exit 3)" in outcomes[2].error and not outcomes[2].bad_input
    assert os.getpid() not in {o.result[1] for o in outcomes if o.result}  # never in the caller


def test_workers_are_kept_across_units_and_one_that_dies_is_replaced():
    """Two workers run six units (a process forked per unit imported again what its models import lazily);
    after one dies, a new worker takes the units left."""
    outcomes = parallel.run_each(list("abcdef"), _work, jobs=2)
    assert [o.result[0] for o in outcomes] == list("abcdef") and len({o.result[1] for o in outcomes}) <= 2
    outcomes = parallel.run_each(["a", "b", "dies", "c", "d", "e"], _work, jobs=2)
    assert "died (exit 3)" in outcomes[2].error
    assert [o.result[0] for o in outcomes if o.result] == list("abcde")
    assert len({o.result[1] for o in outcomes if o.result}) <= 3


def test_a_unit_past_its_deadline_is_named_and_the_rest_go_on():
    started = time.perf_counter()
    outcomes = parallel.run_each(["a", "hangs", "b", "c"], _work, jobs=2, timeout_s=5)
    assert "timed out after 5 s" in outcomes[1].error
    assert [o.result[0] for o in outcomes if o.result] == ["a", "b", "c"]
    assert time.perf_counter() - started < 100  # the hanging worker was killed, not waited for


def test_a_group_shares_one_process_in_its_order():
    outcomes = parallel.run_each(["a", "x", "b", "y"], _work, jobs=2, group=lambda m: m in "ab")
    pid = {o.model_id: o.result[1] for o in outcomes}
    assert pid["a"] == pid["b"] and pid["x"] == pid["y"] and pid["a"] != pid["x"]


def test_the_largest_units_start_first():
    ids = ["s1", "g1", "s2", "g2", "g3", "h1", "h2"]
    assert parallel.units(ids, lambda m: m[0] if m[0] in "gh" else m) == [[1, 3, 4], [5, 6], [0], [2]]
    assert parallel.units(ids[:3], None) == [[0], [1], [2]]


def test_units_with_a_slow_model_start_first_then_the_largest():
    ids = ["s1", "g1", "s2", "g2", "g3", "h1", "h2", "w1"]
    by_letter = lambda m: m[0] if m[0] in "gh" else m  # noqa: E731
    assert parallel.units(ids, by_letter, slow=lambda m: m in ("w1", "h2")) == [[5, 6], [7], [1, 3, 4], [0], [2]]


def test_shipped_diffusion_and_hybrid_models_are_slow_and_decoders_are_not():
    assert reuse.shipped_slow("Wan-AI/Wan2.2-T2V-A14B") and reuse.shipped_slow("syscv-community/sam-hq-vit-base")
    assert reuse.shipped_slow("ai21labs/AI21-Jamba-Large-1.7")
    assert not reuse.shipped_slow("Qwen/Qwen3-8B") and not reuse.shipped_slow("not/a-shipped-model")


def test_models_with_the_same_facts_are_extracted_once_per_session(monkeypatch):
    """Qwen3-4B and Qwen3-4B-Instruct-2507 ship the same facts: the second reuses the first in a session."""
    calls: list[str] = []
    real = pipeline._extract
    monkeypatch.setattr(pipeline, "_extract", lambda config, *a: calls.append(config.model_id) or real(config, *a))
    first, second = "Qwen/Qwen3-4B", "Qwen/Qwen3-4B-Instruct-2507"
    with reuse.session():
        a = pipeline.extract_model(first, validate=False, use_hub=False)
        b = pipeline.extract_model(second, validate=False, use_hub=False)
    assert calls == [first]
    assert b.config.model_id == second and [d.name for d in b.drafts] == [d.name for d in a.drafts]
    assert f"same architecture facts as {first}" in b.skipped[-1]
    alone = pipeline.extract_model(second, validate=False, use_hub=False)  # no session: extracted again
    assert calls == [first, second] and [d.name for d in alone.drafts] == [d.name for d in b.drafts]
    written = pipeline.collect([a, b])
    assert all(set(p.models) == {first, second} for p in written.values())


def test_diffusers_models_are_never_shared():
    """FLUX.1-dev and -Kontext ship the same components, but Kontext's call adds a reference image."""
    assert reuse.key("diffusers", {}, "FLUX.1", "diffusion") is None
    assert reuse.shipped_key("black-forest-labs/FLUX.1-dev") != reuse.shipped_key("black-forest-labs/FLUX.1-Kontext-dev")
    assert reuse.shipped_key("Qwen/Qwen3-8B") == reuse.shipped_key("nvidia/Qwen3-8B-NVFP4")


def test_diffusers_models_with_one_vae_share_a_process_so_their_blocks_are_extracted_once():
    group = reuse.shipped_group
    assert group("black-forest-labs/FLUX.1-dev") == group("runwayml/stable-diffusion-v1-5") == \
        group("stabilityai/stable-diffusion-3.5-large")  # AutoencoderKL
    assert group("black-forest-labs/FLUX.2-dev") == group("kaiyuyue/FLUX.2-dev-vae") != group("black-forest-labs/FLUX.1-dev")
    assert group("Wan-AI/Wan2.2-T2V-A14B") != group("black-forest-labs/FLUX.1-dev")
    assert group("briaai/FIBO") == "briaai/FIBO"  # no VAE component shipped: a process of its own
    assert group("Qwen/Qwen3-8B") == group("nvidia/Qwen3-8B-NVFP4") == reuse.shipped_key("Qwen/Qwen3-8B")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("models", [["meta-llama/Llama-3.2-1B", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B",
                                     "nvidia/Qwen3-8B-NVFP4"]])
def test_jobs_write_the_same_files_as_one_process(tmp_path, models, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser()
    extract_cli.add_arguments(parser)
    trees = []
    for jobs in ("1", "3", None):  # None: the default (the cores, bounded by memory)
        out = tmp_path / str(jobs)
        argv = [a for m in models for a in ("--model", m)] + ["--no-validate", "-o", str(out)]
        assert extract_cli.handle(parser.parse_args(argv + (["--jobs", jobs] if jobs else []))) == 0
        trees.append(_tree(out))
    assert trees[0] and trees[0] == trees[1] == trees[2]


def test_jobs_default_to_the_cores_and_for_several_models_to_what_memory_holds(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(block_pool, "_available_bytes", lambda: 20 << 30)
    assert parallel.default_jobs(1) == 8  # one model: its block workers are bounded per block (block_pool.wanted)
    assert parallel.default_jobs(5) == 2  # 20 GiB hold two model processes of 8 GiB
    monkeypatch.setattr(block_pool, "_available_bytes", lambda: 4 << 30)
    assert parallel.default_jobs(5) == 1
