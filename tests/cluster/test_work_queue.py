"""The cluster's work queue, problem shipping and start-up, without Ray: order, re-queue, strikes, content
transfer, the actor's device, and a driver that never imports torch."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from solbench.orchestrator.cluster_actor import node_device
from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.jobs import build_jobs, make_job
from solbench.orchestrator.shipping import pack_problem, unpack_problem
from solbench.orchestrator.work_queue import MAX_STRIKES, WorkItem, WorkQueue
from solbench.spec.errors import SpecError
from solbench.spec.problem import load_problem
from tests.child_env import repo_env
from tests.runner.conftest import write_problem


def items(tmp_path, sizes_by_name: dict[str, tuple[int, ...]]) -> list[WorkItem]:
    out = []
    for name, sizes in sizes_by_name.items():
        problem = load_problem(write_problem(tmp_path, sizes=sizes, name=name))
        job = make_job(problem, None)
        out.append(WorkItem(job, job.workloads))
    return out


def test_longest_items_first(tmp_path):
    queue = WorkQueue(items(tmp_path, {"short": (64,), "long": (64, 96, 128), "huge_tensors": (1 << 27,)}))
    order = [queue.take().job.problem.name for _ in range(3)]
    assert order == ["huge_tensors", "long", "short"]


def test_dead_actor_work_goes_back_and_a_double_killer_fails(tmp_path):
    (item,) = items(tmp_path, {"p": (64, 96, 128)})
    queue = WorkQueue([item])
    first = queue.take()
    reported = {first.workloads[0].uuid}
    assert queue.give_back(first, reported) == []  # w1 was in flight: one strike, back in the queue
    again = queue.take()
    assert [w.uuid for w in again.workloads] == [w.uuid for w in item.workloads[1:]]
    assert again.strikes == {item.workloads[1].uuid: 1}
    failed = queue.give_back(again, set())  # w1 in flight again: MAX_STRIKES reached
    assert MAX_STRIKES == 2 and [w.uuid for w in failed] == [item.workloads[1].uuid]
    last = queue.take()
    assert [w.uuid for w in last.workloads] == [item.workloads[2].uuid]
    queue.finish()
    assert queue.take() is None and queue.idle()


def test_free_taker_waits_while_work_is_in_flight(tmp_path):
    (item,) = items(tmp_path, {"p": (64, 96)})
    queue = WorkQueue([item])
    running = queue.take()
    got = []
    waiter = threading.Thread(target=lambda: got.append(queue.take(timeout_s=0.05)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive(), "an empty queue with work in flight must not end a taker"
    queue.give_back(running, set())  # the other actor died: its work is there to take
    waiter.join(10)
    assert got and got[0] is not None and len(got[0].workloads) == 2


def test_problem_travels_by_content_with_its_external_baseline(tmp_path):
    root = tmp_path / "repo"
    folder = write_problem(root / "problem_defs" / "core", name="axpy_fp32")
    (folder / "blob.bin").write_bytes(b"\x00\x01" * 100)
    baseline = root / "reference_impls" / "core" / "axpy_fp32.baseline.py"
    baseline.parent.mkdir(parents=True)
    baseline.write_text("import torch\n\ndef run(x, y):\n    return x * 2.0 + y\n")
    (job,) = build_jobs(folder, None)
    shipped = pack_problem(job.problem)
    assert shipped.digest == pack_problem(job.problem).digest, "the same content, the same name"
    node = tmp_path / "node"
    problem = unpack_problem(shipped, node)
    assert problem.directory != folder and node in problem.directory.parents
    assert problem.definition == job.problem.definition and problem.workloads == job.problem.workloads
    assert (problem.directory / "blob.bin").read_bytes() == b"\x00\x01" * 100
    assert problem.baseline_path.read_text() == baseline.read_text()
    assert unpack_problem(shipped, node).directory == problem.directory, "unpacked once per content"
    (folder / "workload.jsonl").write_text((folder / "workload.jsonl").read_text().splitlines()[0] + "\n")
    assert pack_problem(load_problem(folder)).digest != shipped.digest


def test_actor_device_from_the_gpu_ray_gave_it(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # what Ray sets for an actor holding GPU 3
    assert node_device(RunConfig(device="auto"), gpu=True) == "cuda:0"
    assert node_device(RunConfig(device="cpu"), gpu=True) == "cpu"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU given: not trusted, and none is visible
    assert node_device(RunConfig(device="auto"), gpu=True) == "cpu"
    with pytest.raises(SpecError, match="was asked for"):
        node_device(RunConfig(device="cuda"), gpu=True)


def test_cluster_driver_never_imports_torch():
    """The driver's start-up is on every cluster run's wall time; torch is the actors' (and workers') business."""
    code = ("import sys\nimport solbench.cli.run, solbench.orchestrator.scheduler, solbench.orchestrator.cluster\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))[:3])")
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=repo_env(repo))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
