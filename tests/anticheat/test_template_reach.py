"""The worker template (orchestrator/zygote.py) is out of a solution's reach (issue 49). Every solution's
worker is forked from it, so a solution that could stop, kill, trace, read or write the template could
reach every worker after it. A hostile solution, given the template's pid, tries to signal it (0, SIGSTOP,
SIGTERM, SIGKILL), attach to it, open its memory and descriptors, take a descriptor through a pidfd,
and find it by name in /proc; it writes what it got into /dev/shm (where its sandbox lets it write).
Everything must fail, the template must still run unstopped, and the next solution must still be forked
from it and PASS. Real processes, the real sandbox, one `api.Evaluator`."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from solbench import api
from solbench.orchestrator import zygote
from solbench.spec.trace import Status
from tests.anticheat.attempts import ATTEMPT
from tests.anticheat.suite import write_problem
from tests.conftest import HAS_CUDA

HONEST = '''# solbench: problem=ac_axpy
def run(x, y):
    return x * 2.0 + y
'''

REACHER = '''# solbench: problem=ac_axpy
import ctypes, errno, json, os, signal

TEMPLATE = {template}
libc = ctypes.CDLL(None, use_errno=True)


{attempt}

def pidfd_steal(pid):
    pidfd = libc.syscall(434, pid, 0)  # pidfd_open
    if pidfd < 0:
        return pidfd
    return min(libc.syscall(438, pidfd, fd, 0) for fd in range(3, 12))  # pidfd_getfd: each below 0 if refused


seen = {{}}
for name, pid in (("template", TEMPLATE), ("parent", os.getppid())):
    if pid <= 1:
        seen[name] = "no such process in sight (pid %d)" % pid
        continue
    seen[name + "_probe"] = attempt(lambda: os.kill(pid, 0))
    for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGKILL):
        seen[name + "_" + sig.name] = attempt(lambda: os.kill(pid, sig))
    seen[name + "_ptrace"] = attempt(lambda: libc.ptrace(16, pid, None, None))
    seen[name + "_mem"] = attempt(lambda: os.open(f"/proc/{{pid}}/mem", os.O_RDWR))
    seen[name + "_fds"] = attempt(lambda: os.listdir(f"/proc/{{pid}}/fd"))
    seen[name + "_pidfd_getfd"] = attempt(lambda: pidfd_steal(pid))
found = []
try:
    entries = os.listdir("/proc")  # a GPU worker's read rules leave it only its own /proc entry
except OSError as exc:
    entries, seen["proc_listing"] = [], errno.errorcode.get(exc.errno, str(exc.errno))
for entry in entries:
    if entry.isdigit() and int(entry) != os.getpid():
        try:
            if b"solbench.worker" in open(f"/proc/{{entry}}/cmdline", "rb").read():
                found.append(int(entry))
        except OSError:
            pass
seen["found_by_name"] = found
with open({report!r}, "a") as f:
    f.write(json.dumps(seen) + "\\n")


def run(x, y):
    return x * 2.0 + y
'''


def template_pids() -> list[int]:
    return [t.process.pid for t in zygote._templates.values() if t.state == "ready" and t.process is not None]


def state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_solution_cannot_reach_the_template_it_was_forked_from(tmp_path, device):
    if device == "cuda" and not HAS_CUDA:
        pytest.skip("needs a CUDA GPU")
    if not zygote.wanted(device):
        pytest.skip("workers are spawned here (SOLBENCH_WORKER_START=spawn, or not Linux)")
    problem = write_problem(tmp_path)
    report = Path(f"/dev/shm/solbench-reach-{uuid.uuid4().hex}.jsonl")
    options = dict(device=device, trials=1, warmup=1, iters=2, adaptive=False, timing_rounds=1, max_workloads=1)
    try:
        with api.Evaluator(**options) as evaluator:
            first = evaluator.evaluate_source(problem, HONEST, "honest.py")
            assert [t.status for t in first] == [Status.PASSED], first[0].evaluation.log[-2000:]
            templates = template_pids()
            assert templates, "no template is running: the workers were not forked"
            source = REACHER.format(template=templates[-1], report=str(report), attempt=ATTEMPT)
            hostile = evaluator.evaluate_source(problem, source, "reacher.py")
            assert report.is_file(), f"the solution never ran: {hostile[0].evaluation.log[-2000:]}"
            seen = json.loads(report.read_text().splitlines()[0])
            sandbox = hostile[0].evaluation.environment.sandbox or {}
            if device == "cuda" and "signals only inside" not in str(sandbox.get("landlock")):
                pytest.skip(f"this kernel does not scope signals (Landlock ABI < 6): {sandbox.get('landlock')}")
            reached = {k: v for k, v in seen.items() if v == "ok"}
            assert not reached, seen
            assert all(pid not in seen["found_by_name"] for pid in templates), seen
            for pid in templates:
                assert state_of(pid) in "SR", f"template {pid} is {state_of(pid)}"
            after = evaluator.evaluate_source(problem, HONEST, "after.py")
            assert [t.status for t in after] == [Status.PASSED], after[0].evaluation.log[-2000:]
            assert template_pids() == templates  # the same templates, still forking
            spare = evaluator.worker_pids()[device].get("spare")
            if spare:
                assert parent_of(spare) in templates
    finally:
        report.unlink(missing_ok=True)
