"""Reused reference facts are keyed by content (issue 47, finding 1): a problem sent by content with the same
definition and workload uuid but other content (a batch 10x larger) gets a record of its own, and an honest
candidate's speedup on the real problem stays at its true value."""

from __future__ import annotations

import json
from pathlib import Path

from solbench import api
from solbench.orchestrator import timed
from solbench.orchestrator.reuse_key import reuse_key
from solbench.spec.problem import load_problem
from solbench.spec.trace import Status
from tests.runner.conftest import write_problem
from tests.serve.conftest import FAST, Service

# Every call sleeps past the longest slot band's floor (timed.SLOTS_BY_CALL_S), so the attacker's candidate and
# the honest one time with the same block settings: only the workload's content tells their records apart.
BAND_S = 1.2 * timed.SLOTS_BY_CALL_S[0][0]
HONEST_N, POISON_N = 64, 640
REFERENCE = f"""
import time

import torch

def run(x, y):
    time.sleep({BAND_S} * x.shape[0] / {HONEST_N})  # the reference's cost grows with the batch
    return x * 2.0 + y
"""
HONEST = f"# solbench: problem=axpy_fp32\nimport time\n\ndef run(x, y):\n    time.sleep({BAND_S} * x.shape[0] / {HONEST_N})\n" \
         "    return x * 2.0 + y\n"
ATTACKER = f"# solbench: problem=axpy_fp32\nimport time\n\ndef run(x, y):\n    time.sleep({BAND_S})\n    return y + 2.0 * x\n"
REUSED = "eager reference time reused"


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


def test_a_same_uuid_problem_of_other_content_does_not_poison_an_honest_speedup(tmp_path):
    honest_problem = same_uuid_problem(tmp_path / "honest", HONEST_N)
    poison_problem = same_uuid_problem(tmp_path / "poison", POISON_N)
    with Service(tmp_path / "service") as service:
        client = api.Client(service.url)
        poison = client.evaluate(poison_problem, source=ATTACKER, **FAST)
        first = client.evaluate(honest_problem, source=HONEST, **FAST)
        again = client.evaluate(honest_problem, source=HONEST.replace("x * 2.0 + y", "2.0 * x + y"), **FAST)
    assert [t.status for t in poison + first + again] == [Status.PASSED] * 3
    poisoned_ms = poison[0].evaluation.performance.reference_latency_ms
    honest = first[0].evaluation.performance
    assert not any(REUSED in w for w in first[0].evaluation.warnings)  # a record of its own, measured here
    assert honest.reference_latency_ms < poisoned_ms / 3  # ~1/10 of it: not the 10x batch's time
    assert 1 / 3 < honest.speedup_factor < 3  # the honest candidate does the reference's own work
    # Its own record is reused for the next candidate of the same content, and said so.
    assert any(REUSED in w for w in again[0].evaluation.warnings)
    assert again[0].evaluation.performance.reference_latency_ms == honest.reference_latency_ms
