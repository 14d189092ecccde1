"""The on-disk analysis cache: hits, invalidation, corrupt entries, switched off."""

from __future__ import annotations

import json

import pytest

from solbench.sol import cache
from solbench.sol.analyser import analyse
from solbench.spec.definition import Definition

GEMM = "import torch\ndef run(A, B):\n    return A @ B.T\n"


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV, str(root))
    return root


@pytest.fixture
def gemm(definition_of):
    return _var_gemm(definition_of)


def _var_gemm(definition_of) -> Definition:
    """A GEMM with a variable M (the tests' workloads differ by axes)."""
    base = definition_of({"A": (["M", "K"], "float16"), "B": (["N", "K"], "float16")},
                         {"C": (["M", "N"], "float16")}, GEMM, {"M": 1, "N": 64, "K": 32}, name="gemm").to_dict()
    base["axes"]["M"] = {"type": "var"}
    return Definition.from_dict(base)


def _entries(root):
    return sorted(root.glob("*.json"))


def test_second_call_is_read_from_disk(cache_root, gemm):
    first = cache.cached_analyse(gemm, {"M": 16})
    assert first == analyse(gemm, {"M": 16})
    [entry] = _entries(cache_root)
    data = json.loads(entry.read_text())
    data["notes"] = ["marker: read from the cache"]  # only a read of this file can return this note
    entry.write_text(json.dumps(data))
    assert cache.cached_analyse(gemm, {"M": 16}).notes == ["marker: read from the cache"]


def test_key_covers_axes_convention_definition_and_version(cache_root, gemm, definition_of, monkeypatch):
    cache.cached_analyse(gemm, {"M": 16})
    cache.cached_analyse(gemm, {"M": 32})
    solar = cache.cached_analyse(gemm, {"M": 16}, convention="solar")
    assert solar.convention == "solar" and len(_entries(cache_root)) == 3
    other = _var_gemm(definition_of).to_dict()
    other["reference"] = GEMM.replace("A @ B.T", "(A @ B.T) * 2")
    changed = cache.cached_analyse(Definition.from_dict(other), {"M": 16})
    assert changed.flops_other > 0 and len(_entries(cache_root)) == 4
    monkeypatch.setattr(cache, "analyser_version", lambda: "another analyser")
    cache.cached_analyse(gemm, {"M": 16})
    assert len(_entries(cache_root)) == 5  # new code: a new entry, the old one is not reused


def test_corrupt_entries_are_recomputed(cache_root, gemm):
    fresh = cache.cached_analyse(gemm, {"M": 16})
    [entry] = _entries(cache_root)
    for garbage in ("{not json", json.dumps({"convention": "strict"}), json.dumps([1, 2]),
                    json.dumps({**json.loads(json.dumps(fresh.to_dict())), "bytes_min": "many"})):
        entry.write_text(garbage)
        assert cache.cached_analyse(gemm, {"M": 16}) == fresh
        assert json.loads(entry.read_text())["bytes_min"] == fresh.bytes_min  # rewritten


def test_switched_off_and_unwritable(tmp_path, monkeypatch, gemm):
    monkeypatch.setenv(cache.ENV, "off")
    assert cache.cache_dir() is None
    assert cache.cached_analyse(gemm, {"M": 16}) == analyse(gemm, {"M": 16})
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv(cache.ENV, str(blocker / "sub"))
    assert cache.cached_analyse(gemm, {"M": 16}) == analyse(gemm, {"M": 16})  # no crash, no entry


def test_default_location_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv(cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "solbench" / "sol"


def test_run_analysis_pool_reuses_cached_results(cache_root, gemm):
    """`solbench run` analyses through the cache: what `solbench sol` stored is what a run gets."""
    from solbench.orchestrator import analysis

    cache.cached_analyse(gemm, {"M": 16})
    [entry] = _entries(cache_root)
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "notes": ["marker: from solbench sol"]}))
    assert analysis._analyse(gemm.to_dict(), {"M": 16}, {}).notes == ["marker: from solbench sol"]
