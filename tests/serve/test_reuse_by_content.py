"""Reused reference facts are keyed by content (issue 47, finding 1): the same workload uuid with other content
(axis values, tolerance, blob bytes, reference code) gives another key. Through a real service, with the
poisoning submissions sent first: tests/anticheat/test_reuse_cases.py."""

from __future__ import annotations

import json
from pathlib import Path

from solbench.orchestrator.reuse_key import reuse_key
from solbench.spec.problem import load_problem
from tests.runner.conftest import write_problem

HONEST_N, POISON_N = 64, 640
REFERENCE = "import torch\n\ndef run(x, y):\n    return x * 2.0 + y\n"


def same_uuid_problem(root: Path, n: int, **tolerance) -> Path:
    """The axpy problem with one workload named "w0" whatever its size."""
    folder = write_problem(root, sizes=(n,), reference=REFERENCE)
    line = {"uuid": "w0", "axes": {"n": n}, "inputs": {"x": {"type": "random"}, "y": {"type": "random"}},
            "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5, **tolerance}}
    (folder / "workload.jsonl").write_text(json.dumps(line) + "\n")
    return folder


def key_of(folder: Path, kind: str = "eager", device: str = "cpu") -> str:
    problem = load_problem(folder)
    return reuse_key(problem, problem.workloads[0], kind, device, False, "settings", [folder])


def test_the_key_takes_the_workload_s_content_not_its_uuid(tmp_path):
    honest = key_of(same_uuid_problem(tmp_path / "a", HONEST_N))
    assert key_of(same_uuid_problem(tmp_path / "b", HONEST_N)) == honest  # the same content elsewhere: the same key
    assert key_of(same_uuid_problem(tmp_path / "c", POISON_N)) != honest  # other axis values
    assert key_of(same_uuid_problem(tmp_path / "d", HONEST_N, max_atol=1.0)) != honest  # another tolerance
    assert key_of(same_uuid_problem(tmp_path / "a", HONEST_N), kind="compile") != honest
    other_reference = write_problem(tmp_path / "e", sizes=(HONEST_N,), reference=REFERENCE.replace("2.0", "3.0"))
    (other_reference / "workload.jsonl").write_text((tmp_path / "a" / "axpy_fp32" / "workload.jsonl").read_text())
    assert key_of(other_reference) != honest  # the definition's reference code


def test_the_key_takes_the_content_of_the_blobs_a_workload_reads(tmp_path):
    folder = same_uuid_problem(tmp_path, HONEST_N)
    line = json.loads((folder / "workload.jsonl").read_text())
    line["inputs"]["x"] = {"type": "safetensors", "path": "blobs/x.safetensors", "tensor_key": "x"}
    (folder / "workload.jsonl").write_text(json.dumps(line) + "\n")
    (folder / "blobs").mkdir()
    blob = folder / "blobs" / "x.safetensors"
    blob.write_bytes(b"first content")
    first = key_of(folder)
    blob.write_bytes(b"other content, same path and uuid")
    assert key_of(folder) != first


def test_a_service_s_reference_processes_keep_their_compiler_caches_private(tmp_path, monkeypatch):
    from solbench.orchestrator.process import PRIVATE_REFERENCE_CACHE_ENV, worker_cache

    monkeypatch.delenv(PRIVATE_REFERENCE_CACHE_ENV, raising=False)
    shared = worker_cache("reference", str(tmp_path))
    assert not shared.startswith(str(tmp_path))  # a run's: kept across runs
    monkeypatch.setenv(PRIVATE_REFERENCE_CACHE_ENV, "1")  # what a service sets before its workers start
    assert worker_cache("reference", str(tmp_path)) == str(tmp_path / "cache")
