"""Workers forked from the pre-imported template (orchestrator/zygote.py, worker/zygote.py) start in the state
a spawned worker starts in (issue 49): the same namespaces, session and group, parent-death signal, open
descriptors, environment, signal dispositions, flags, thread count, sandbox and cgroup. Two real
`solbench run`s of one solution that writes what it sees into /dev/shm (where its sandbox lets it write):
one with SOLBENCH_WORKER_START=spawn, one with the default; on a GPU too (`-m gpu`), where the worker has no
PID namespace and sees its GPU through CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from solbench.orchestrator import zygote
from tests.child_env import repo_env
from tests.conftest import HAS_CUDA
from tests.runner.conftest import write_problem, write_solution

REPO = Path(__file__).resolve().parents[2]

STATE = '''
import ctypes, json, os, resource, signal, sys, tempfile
import torch

libc = ctypes.CDLL(None)


def prctl_int(option):
    value = ctypes.c_int(-1)
    result = libc.prctl(option, ctypes.byref(value), 0, 0, 0)
    return value.value if option == 2 else result


def descriptors():
    out = {}
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        out[fd] = target.split(":")[0] if target.startswith(("socket:", "pipe:", "anon_inode:")) else target
    return out


def status(field):
    return next(line.split()[1] for line in open("/proc/self/status") if line.startswith(field + ":"))


def thread_names():
    """The process's threads by name (CUDA's carry a hexadecimal number of their own), once each pool a library makes on
    first use exists: torch's intra-op pool, and numpy's BLAS pool, which numpy's import starts in a spawned
    worker and a fork leaves behind (OpenBLAS starts it again at its next call)."""
    torch.ones(1 << 22).add_(1.0).sum()
    if "numpy" in sys.modules:
        numpy = sys.modules["numpy"]
        numpy.ones((256, 256)) @ numpy.ones((256, 256))
    names = {}
    for task in os.listdir("/proc/self/task"):
        try:
            name = re.sub(r"^cuda[0-9a-f]+$", "cudaN", open(f"/proc/self/task/{task}/comm").read().strip())
        except OSError:
            continue
        names[name] = names.get(name, 0) + 1
    return dict(sorted(names.items()))


here = os.getcwd()
run_folder = os.path.dirname(here)


def norm(value):
    return str(value).replace(here, "<scratch>").replace(run_folder, "<run>")


umask = os.umask(0o22)
os.umask(umask)
state = {
    "forked": "solbench.worker.zygote" in sys.modules,
    # the namespace's first process (its outside ids read 0), or a session and group leader of its own
    "ids": [os.getpid() == 1, os.getppid() == 0, os.getpgid(0) == os.getpid(), os.getsid(0) == os.getpid()],
    "pid_namespace": os.readlink("/proc/self/ns/pid"),
    "pdeathsig": prctl_int(2), "dumpable": prctl_int(3),
    "descriptors": descriptors(),
    "environment": {k: norm(v) for k, v in os.environ.items() if k != "SOLBENCH_WORKER_START"},
    "signals": {name: status(name) for name in ("SigBlk", "SigIgn", "SigCgt")},
    "handlers": {s.name: str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD,
                                                            signal.SIGHUP, signal.SIGPIPE)},
    # once the libraries' thread pools are in use: a pool a spawned worker's start-up made and a fork left
    # behind is made again on first use (and must not hang, as a pool from before the fork would)
    "threads": thread_names(), "torch_threads": torch.get_num_threads(),
    "tempdir": norm(tempfile.gettempdir()), "cwd": norm(here), "umask": umask,
    "flags": list(sys.flags), "path": [norm(p) for p in sys.path], "argv": [norm(a) for a in sys.argv],
    "cgroup": re.sub(r"solbench-[0-9]+-[0-9]+-", "solbench-N-N-", open("/proc/self/cgroup").read()),
    "nofile": resource.getrlimit(resource.RLIMIT_NOFILE), "no_new_privs": status("NoNewPrivs"),
    "seccomp": status("Seccomp"), "capabilities": status("CapEff"),
    "cuda": [torch.cuda.device_count(), torch.cuda.get_device_name(0)] if torch.cuda.is_available() else [],
}
with open(REPORT, "a") as f:
    f.write(json.dumps(state) + "\\n")


def run(x, y):
    return x * 2.0 + y
'''


def run_and_report(tmp_path: Path, way: str | None, device: str) -> tuple[dict, dict, str]:
    """(what the solution's worker saw, the trace's environment, the run's stderr)."""
    problem = write_problem(tmp_path / way_name(way))
    report = Path(f"/dev/shm/solbench-forked-{uuid.uuid4().hex}.jsonl")
    solution = write_solution(tmp_path / way_name(way), f"import re\nREPORT = {str(report)!r}\n" + STATE)
    env = repo_env(REPO)
    env.pop("SOLBENCH_WORKER_START", None)
    if way:
        env["SOLBENCH_WORKER_START"] = way
    out = tmp_path / f"{way_name(way)}.jsonl"
    try:
        result = subprocess.run([sys.executable, "-m", "solbench", "run", str(problem), "--solution", str(solution),
                                 "--device", device, "--max-workloads", "1", "--trials", "1", "--iters", "2",
                                 "--no-adaptive", "--timing-rounds", "1", "-o", str(out)],
                                env=env, capture_output=True, text=True, timeout=600)
        assert out.is_file(), f"exit {result.returncode}: {result.stderr[-3000:]}"
        trace = json.loads(out.read_text().splitlines()[0])
        assert trace["evaluation"]["status"] == "PASSED", trace["evaluation"]["log"][-2000:]
        assert report.is_file(), "the solution never ran"
        state = json.loads(report.read_text().splitlines()[0])
    finally:
        report.unlink(missing_ok=True)
    return state, trace["evaluation"]["environment"], result.stderr


def way_name(way: str | None) -> str:
    return way or "default"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the template forks on Linux only")
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_forked_worker_starts_in_the_state_a_spawned_one_does(tmp_path, device):
    if device == "cuda" and not HAS_CUDA:
        pytest.skip("needs a CUDA GPU")
    spawned, spawned_env, _ = run_and_report(tmp_path, "spawn", device)
    forked, forked_env, stderr = run_and_report(tmp_path, None if zygote.wanted(device) else "fork", device)
    assert "not forked" not in stderr, stderr[-2000:]  # the template forked, and said nothing
    assert forked.pop("forked") is True and spawned.pop("forked") is False
    # descriptor numbers differ (a spawned worker keeps the orchestrator's); what is open must not
    assert sorted(forked.pop("descriptors").values()) == sorted(spawned.pop("descriptors").values())
    mine = os.readlink("/proc/self/ns/pid")
    if str(spawned_env["sandbox"].get("namespaces", "")).startswith(("pid", "user+pid")):
        assert mine not in (forked.pop("pid_namespace"), spawned.pop("pid_namespace"))  # each its own (numbers reused)
        assert forked["ids"] == [True, True, False, False]  # pid 1; its parent and group are outside
    else:
        assert forked["ids"][2:] == [True, True]  # its own session and process group
    differ = {key: (forked.get(key), value) for key, value in spawned.items() if forked.get(key) != value}
    assert not differ, differ
    assert forked["pdeathsig"] == 9  # SIGKILL, tied to its parent (the template, or the namespace's supervisor)
    for field in ("sandbox", "cpu_threads", "torch", "python", "triton"):
        assert forked_env.get(field) == spawned_env.get(field), field


def test_a_template_that_cannot_start_leaves_spawned_workers_and_one_line(monkeypatch, capsys):
    """Any failure of the template (here: not ready in time) spawns the workers that waited for it, says so
    once on stderr, and every later worker of that environment is spawned; nothing crashes."""
    from solbench.orchestrator import zygote
    from solbench.orchestrator.process import WorkerProcess
    from solbench.protocol import messages as msg

    monkeypatch.delenv("SOLBENCH_WORKER_START", raising=False)
    monkeypatch.setattr(zygote, "READY_TIMEOUT_S", 0.01)
    monkeypatch.setattr(zygote, "_said", [])
    key = {"SOLBENCH_TEST_TEMPLATE": uuid.uuid4().hex}  # a template of its own, not the other tests'
    workers = [WorkerProcess("cpu", extra_env=key) for _ in range(2)]
    try:
        for worker in workers:
            worker.start()
            assert isinstance(worker.request(msg.Ping(), 300), msg.Pong)
        stderr = capsys.readouterr().err
        assert stderr.count("workers are spawned, not forked") == 1, stderr
        assert "did not start" in stderr
        template = next(t for k, t in zygote._templates.items() if dict(k).get("SOLBENCH_TEST_TEMPLATE"))
        assert template.state == "failed"
        assert all(worker.proc._popen is not None for worker in workers)  # spawned, both
    finally:
        for worker in workers:
            worker.kill()


def test_an_orchestrator_keeps_at_most_max_templates(monkeypatch, capsys):
    """A long-lived orchestrator meets many import environments (a test session, a service): past
    MAX_TEMPLATES, a new environment retires the least recently used idle template, whose process ends; the
    retired environment gets a new template when it is needed again, and nothing is said on stderr."""
    from solbench.orchestrator import zygote
    from solbench.orchestrator.process import WorkerProcess
    from solbench.protocol import messages as msg

    monkeypatch.delenv("SOLBENCH_WORKER_START", raising=False)
    monkeypatch.setattr(zygote, "MAX_TEMPLATES", 1)
    monkeypatch.setattr(zygote, "_said", [])
    keys = [{"SOLBENCH_TEST_TEMPLATE": uuid.uuid4().hex} for _ in range(2)]
    first = None
    for key in keys:
        worker = WorkerProcess("cpu", extra_env=key)
        try:
            worker.start()
            assert isinstance(worker.request(msg.Ping(), 300), msg.Pong)
            assert worker.proc._popen is None  # forked, not spawned
        finally:
            worker.kill()
        mine = {k["SOLBENCH_TEST_TEMPLATE"] for k in keys}
        ours = [t for k, t in zygote._templates.items() if dict(k).get("SOLBENCH_TEST_TEMPLATE") in mine]
        assert len(ours) == 1
        first = first or ours[0]
    assert first.state == "retired" and first.process.poll() is not None
    assert "not forked" not in capsys.readouterr().err
