"""Runs over a real local Ray cluster whose CPU slots stand in for GPUs (issue 17's acceptance on the CPU).

One cluster serves the whole module (starting Ray costs seconds); the problems are tiny CPU problems.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.jobs import build_jobs
from solbench.orchestrator.scheduler import run_jobs
from solbench.orchestrator.sink import TraceSink
from solbench.report.traces import TraceFile
from tests.child_env import repo_env
from tests.runner.conftest import write_problem, write_solution
from tests.signals import default_sigint

ray = pytest.importorskip("ray")
from solbench.orchestrator.cluster import ClusterLaunch, ClusterRun  # noqa: E402 - needs ray, checked just above

REPO = Path(__file__).resolve().parents[2]
WRONG = "import torch\n\ndef run(x, y):\n    return x * 2.0 + y + 1.0\n"
SLOW = "import time\nimport torch\n\ndef run(x, y):\n    time.sleep(0.3)\n    return x * 2.0 + y\n"


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster with 4 CPU slots for the module; yields the head's GCS address."""
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def config(**overrides) -> RunConfig:
    base = RunConfig(device="cpu", trials=2, warmup=1, iters=3, adaptive=False, timing_rounds=1, timeout_s=120,
                     seed=1234)
    return replace(base, **overrides)


def dataset(root: Path, count: int = 3, sizes=(64, 96, 128)) -> Path:
    for i in range(count):
        write_problem(root, sizes=sizes, name=f"axpy_{i}")
    return root


def comparable(trace) -> dict:
    """A trace without what differs from run to run on the same machine (times, clocks, phases, cores)."""
    data = trace.to_dict()
    evaluation = data["evaluation"]
    for key in ("timestamp", "performance", "seconds", "phases_s", "sol"):
        evaluation.pop(key, None)
    evaluation["environment"] = {k: v for k, v in (evaluation["environment"] or {}).items()
                                 if not k.startswith("clocks") and k != "cpu_cores"}  # which core was free
    return data


def keyed(traces) -> dict:
    return {t.key(): t for t in traces}


def test_cluster_run_equals_local_run(cluster, tmp_path):
    root = dataset(tmp_path / "problems")
    wrong = tmp_path / "wrong.py"
    wrong.write_text("# solbench: problem=axpy_0\n" + WRONG)
    jobs = build_jobs(root, None) + build_jobs(root, [wrong])  # three references and one wrong solution
    local = keyed(run_jobs(jobs, config(), ["cpu"]))
    traces_path = tmp_path / "cluster.jsonl"
    remote = keyed(run_jobs(jobs, config(cluster="auto", cluster_actors=2), [],
                            trace_file=TraceFile(traces_path)))
    assert set(remote) == set(local) and len(local) == 4 * 3
    assert {t.status.value for t in local.values()} == {"PASSED", "INCORRECT_NUMERICAL"}
    for key, trace in local.items():
        assert comparable(remote[key]) == comparable(trace), key
        assert remote[key].evaluation.performance is not None or trace.evaluation.performance is None
    lines = [json.loads(line) for line in traces_path.read_text().splitlines()]
    assert len(lines) == len(remote), "every trace appended once to the one -o file"


def test_killed_actor_work_is_requeued_none_lost_or_duplicated(cluster, tmp_path):
    root = dataset(tmp_path / "problems", count=3, sizes=(64, 80, 96, 112))
    jobs = build_jobs(root, None)
    traces_path = tmp_path / "t.jsonl"
    sink = TraceSink(TraceFile(traces_path))
    killed: list[str] = []
    run: ClusterRun | None = None

    def on_trace(job, trace):  # the first finished workload: kill its actor while the job still owes three
        if not killed:
            slot = next(s for s in run.slots if s.label == where[id(job)])
            killed.append(slot.label)
            os.kill(slot.info["pid"], signal.SIGKILL)

    where: dict[int, str] = {}
    sink.on_trace = on_trace
    run = ClusterRun(jobs, config(cluster="auto", cluster_actors=2), sink,
                     on_job_start=lambda job, label: where.__setitem__(id(job), label))
    traces = run.run()
    assert killed and sum(s.deaths for s in run.slots) == 1
    keys = [t.key() for t in traces]
    assert len(keys) == len(set(keys)) == 3 * 4, "none lost, none duplicated"
    on_disk = [json.loads(line)["workload"]["uuid"] for line in traces_path.read_text().splitlines()]
    assert len(on_disk) == 12
    assert all(t.status.value == "PASSED" for t in traces)


def test_workload_that_kills_two_actors_is_a_failure(cluster, tmp_path):
    root = dataset(tmp_path / "problems", count=1, sizes=(64, 96, 128))
    jobs = build_jobs(root, None)
    sink = TraceSink()
    kills: list[str] = []
    run: ClusterRun | None = None

    def on_job_start(job, label):  # every start of the job kills its actor, until two have died
        if len(kills) < 2:
            slot = next(s for s in run.slots if s.label == label)
            kills.append(label)
            os.kill(slot.info["pid"], signal.SIGKILL)

    run = ClusterRun(jobs, config(cluster="auto", cluster_actors=1), sink, on_job_start=on_job_start)
    traces = {t.workload_uuid: t for t in run.run()}
    assert len(kills) == 2 and len(traces) == 3
    first = jobs[0].workloads[0].uuid
    assert traces[first].status.value == "RUNTIME_ERROR"
    assert "died 2 times" in traces[first].evaluation.log
    assert all(t.status.value == "PASSED" for u, t in traces.items() if u != first)


def cli(args: list[str], **kwargs) -> subprocess.Popen:
    env = repo_env(REPO)
    return subprocess.Popen([sys.executable, "-m", "solbench", *args], env=env, start_new_session=True, preexec_fn=default_sigint,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)


def uuids(path: Path) -> list[str]:
    return [json.loads(line)["workload"]["uuid"] for line in path.read_text().splitlines() if line.strip()]


def start_slow_run(tmp_path: Path, cluster: str) -> tuple[subprocess.Popen, list[str], Path]:
    """`solbench run --cluster` of six slow workloads, returned once two traces are on disk (mid-run)."""
    problem = write_problem(tmp_path / "p", sizes=(64, 80, 96, 112, 128, 144))
    solution = write_solution(tmp_path, SLOW)
    traces = tmp_path / "traces.jsonl"
    args = ["run", str(problem), "--solution", str(solution), "-o", str(traces), "--device", "cpu",
            "--cluster", cluster, "--cluster-actors", "1", "--trials", "1", "--iters", "2", "--warmup", "1",
            "--no-adaptive", "--no-reference-timing"]
    proc = cli(args)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if traces.exists() and len(uuids(traces)) >= 2:
            break
        time.sleep(0.1)
    return proc, args, traces


def test_resume_after_driver_sigkill(cluster, tmp_path):
    proc, args, traces = start_slow_run(tmp_path, cluster)
    os.killpg(proc.pid, signal.SIGKILL)
    output = proc.communicate()[0].decode()
    before = uuids(traces) if traces.exists() else []
    assert 2 <= len(before) < 6, f"the kill should land mid-run: {output[-2000:]}"
    rerun = cli(args)
    output = rerun.communicate(timeout=600)[0].decode()
    assert rerun.returncode == 0, output
    after = uuids(traces)
    assert len(after) == len(set(after)) == 6, "none lost, none duplicated"
    assert after[: len(before)] == before
    assert "resuming" in output


def test_missing_ray_is_one_line_with_the_install_hint(tmp_path):
    problem = write_problem(tmp_path / "p")
    code = ("import sys; sys.modules['ray'] = None\nfrom solbench.cli import main\n"
            f"sys.exit(main(['run', {str(problem)!r}, '--device', 'cpu', '--cluster', 'auto']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=repo_env(REPO))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr + done.stdout
    assert "pip install 'solbench[ray]'" in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1, done.stderr


def test_bad_cluster_address_is_a_usage_error(tmp_path):
    from solbench.orchestrator.config import configure
    from solbench.spec.errors import SpecError

    with pytest.raises(SpecError, match="use auto, ray"):
        configure(device="cpu", cluster="somewhere")
    with pytest.raises(SpecError, match="--cluster-actors"):
        configure(device="cpu", cluster="auto", cluster_actors=0)


def test_stop_event_ends_a_cluster_run_keeping_finished_traces(cluster, tmp_path):
    problem = write_problem(tmp_path / "p", sizes=(64, 80, 96, 112, 128, 144))
    solution = write_solution(tmp_path, SLOW)
    jobs = build_jobs(problem, [solution])
    stop = threading.Event()
    sink = TraceSink(on_trace=lambda job, trace: stop.set())
    traces = run_jobs(jobs, config(cluster="auto", cluster_actors=1), [], stop=stop,
                      on_trace=sink.on_trace)
    assert 1 <= len(traces) < 6


def test_api_evaluate_on_the_cluster(cluster, tmp_path):
    from solbench import api

    problem = write_problem(tmp_path / "p", sizes=(64, 96))
    traces = api.evaluate(problem, cluster="auto", cluster_actors=1, device="cpu", quick=True, seed=7)
    assert [t.status.value for t in traces] == ["PASSED", "PASSED"]
    assert all(t.evaluation.environment.hostname for t in traces), "the node is named in the environment"


def test_actors_start_their_workers_as_they_are_created(cluster):
    """Before any work is given: the first problem must not wait for the workers' start-up."""
    launch = ClusterLaunch(config(cluster="auto", cluster_actors=1))
    try:
        _actor, ready = launch.slots[0].pending
        info = ray.get(ready, timeout=300)
        assert len(info["worker_pids"]) == 2 and all(info["worker_pids"]), info
        assert all(Path(f"/proc/{pid}").exists() for pid in info["worker_pids"])
    finally:
        launch.close()
    assert launch.slots[0].pending is None and not launch.started_ray, "the test's cluster stays up"
