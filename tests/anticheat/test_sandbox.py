"""The operating-system sandbox (worker/sandbox.py): what this machine allows, and what a solution can
no longer do from inside it (issue 20): plant files the next process imports, edit the problem or the
trace file, leave a daemon behind, or kill the reference worker. Nothing outside the run's temporary
folder and the `-o` file changes, and no process the solution started is alive after the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from solbench.spec.trace import Status
from tests.anticheat.suite import fast_config, write_problem
from tests.child_env import repo_env

REPO = Path(__file__).resolve().parents[2]
DAEMON_ARG = "987.5"
MECHANISMS = ("pdeathsig", "cgroup", "namespaces", "subreaper", "no_new_privs", "landlock", "capabilities", "seccomp",
              "contained_by")


def sandbox_report() -> dict:
    out = subprocess.run([sys.executable, "-m", "solbench.worker.sandbox"], capture_output=True, text=True,
                         timeout=120, env=repo_env(REPO))
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_the_report_says_for_every_mechanism_whether_it_applies():
    report = sandbox_report()
    for name in MECHANISMS:
        assert name in report and (report[name] is True or isinstance(report[name], str)), (name, report)
    assert report["pdeathsig"] is True  # a plain prctl: every Linux kernel has it


def tree_state(root: Path, recursive: bool) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file below `root` (the top level only unless `recursive`); a .pth file's
    content counts through its size and mtime too."""
    state = {}
    walker = os.walk(root) if recursive else [(str(root), [], [e.name for e in os.scandir(root)])]
    for folder, dirs, files in walker:
        dirs[:] = [d for d in dirs if d not in (".git", "__pycache__", ".solbench", ".pytest_cache")]
        for name in files + (dirs if not recursive else []):
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            state[path] = (st.st_size, st.st_mtime_ns)
    return state


PLANTER = '''
import os
import signal
import subprocess

TARGETS = {targets!r}
ORCHESTRATOR = {orchestrator}
WRITE = "; ".join(f"echo planted >> '{{t}}'" for t in TARGETS)

# Through a subprocess: the in-process audit hook never sees these writes.
subprocess.run(["sh", "-c", WRITE + " 2>/dev/null; true"])
# A daemon in its own session that tries again once the run is over, then lingers.
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sh", ["sh", "-c", f"sleep 2; {{WRITE}} 2>/dev/null; exec sleep {daemon}"])
    os._exit(0)
os.waitpid(child, 0)
# Kill the reference worker (a sibling below the orchestrator), hoping for a restart that imports the plant.
for task in os.listdir(f"/proc/{{ORCHESTRATOR}}/task") if os.path.isdir(f"/proc/{{ORCHESTRATOR}}/task") else []:
    try:
        pids = open(f"/proc/{{ORCHESTRATOR}}/task/{{task}}/children").read().split()
    except OSError:
        continue
    for pid in pids:
        try:
            if b"solbench.worker" in open(f"/proc/{{pid}}/cmdline", "rb").read() and int(pid) != os.getpid():
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def run(x, y):
    return x * 3.0 + y  # wrong: only a subverted reference would pass it
'''


def daemons() -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and DAEMON_ARG.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_no_residue_and_no_reach_outside_the_run(tmp_path):
    report = sandbox_report()
    if report.get("landlock") is not True and not str(report.get("landlock", "")).startswith("writes only"):
        pytest.skip(f"Landlock is not available here ({report.get('landlock')}): the audit hook's checks remain")
    from solbench.orchestrator.jobs import make_job
    from solbench.orchestrator.scheduler import run_jobs
    from solbench.report.traces import TraceFile
    from solbench.spec.problem import load_problem
    from solbench.spec.solution import load_solution

    problem_dir = write_problem(tmp_path / "problem")
    trace_path = tmp_path / "out" / "traces.jsonl"
    purelib = Path(sysconfig.get_paths()["purelib"])
    targets = [str(REPO / "solbench_planted.py"), str(REPO / "solbench" / "planted.py"),
               str(purelib / "solbench_planted.pth"), str(problem_dir / "definition.json"), str(trace_path)]
    watched = {"repo": (REPO, True), "site-packages": (purelib, False), "problem": (problem_dir, True)}
    before = {name: tree_state(path, recursive) for name, (path, recursive) in watched.items()}
    source = "# solbench: problem=ac_axpy\n" + PLANTER.format(targets=targets, orchestrator=os.getpid(),
                                                              daemon=DAEMON_ARG)
    (tmp_path / "planter.py").write_text(source)
    problem = load_problem(problem_dir)
    solution = load_solution(tmp_path / "planter.py", problem.definition)
    try:
        traces = run_jobs([make_job(problem, solution, 1)], fast_config(), ["cpu"], trace_file=TraceFile(trace_path))
        time.sleep(4)  # past the daemon's delayed attempt, had it survived
        assert traces and all(t.status != Status.PASSED for t in traces), [t.evaluation.log for t in traces]
        assert all(t.status == Status.INCORRECT_NUMERICAL for t in traces), [t.evaluation.log[-600:] for t in traces]
        assert not daemons(), "the solution's daemon outlived its worker"
        after = {name: tree_state(path, recursive) for name, (path, recursive) in watched.items()}
        for name in watched:
            changed = sorted(set(before[name].items()) ^ set(after[name].items()))
            assert not changed, f"{name} changed: {changed[:5]}"
        lines = trace_path.read_text().splitlines()
        assert lines and all(json.loads(line)["evaluation"]["status"] != "PASSED" for line in lines)
        assert "planted" not in trace_path.read_text()
        assert traces[0].evaluation.environment.sandbox.get("landlock") and traces[0].evaluation.environment.sandbox.get("namespaces")
    finally:
        for pid in daemons():
            os.kill(pid, 9)
        for target in targets[:3]:
            Path(target).unlink(missing_ok=True)


INSIDE = r'''
import ctypes, errno, json, os, signal, sys, threading
from solbench.worker import sandbox
sandbox.enter_from_env()
out = {"applied": sandbox.APPLIED, "pid": os.getpid()}
for name, path in (("repo", sys.argv[1]), ("scratch", sys.argv[2])):
    try:
        with open(os.path.join(path, "probe.txt"), "w") as f:
            f.write("x")
        out[name] = "written"
    except OSError as exc:
        out[name] = errno.errorcode[exc.errno]
try:  # the CUDA driver writes its own /proc entry (thread names): without it, no GPU inside the sandbox
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
        f.write("sandboxed")
    out["own_proc"] = "written"
except OSError as exc:
    out["own_proc"] = errno.errorcode[exc.errno]
libc = ctypes.CDLL(None, use_errno=True)
out["ptrace"] = "ok" if libc.ptrace(0, 0, None, None) == 0 else errno.errorcode[ctypes.get_errno()]  # TRACEME
try:
    os.kill(int(sys.argv[3]), 0)  # the test process: may it be signalled?
    out["signal_outside"] = "ok"
except OSError as exc:
    out["signal_outside"] = errno.errorcode[exc.errno]
print(json.dumps(out))
'''


@pytest.mark.parametrize("namespaces", [True, False], ids=["cpu_worker", "gpu_worker_without_pid_namespace"])
def test_inside_the_sandbox_what_the_machine_allows_is_enforced(tmp_path, namespaces):
    from solbench.orchestrator.process import sandbox_env

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    target = tmp_path / "outside"
    target.mkdir()
    env = repo_env(REPO)
    sandbox_env(env, str(scratch), "solution", namespaces=namespaces)
    out = subprocess.run([sys.executable, "-P", "-c", INSIDE, str(target), str(scratch), str(os.getpid())], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    applied = seen["applied"]
    assert set(MECHANISMS) <= set(applied), applied
    assert seen["scratch"] == "written" and seen["own_proc"] == "written"
    if str(applied["landlock"]).startswith("writes only"):
        assert seen["repo"] == "EACCES" and not (target / "probe.txt").exists()
    if str(applied["seccomp"]).startswith("refused"):
        assert seen["ptrace"] == "EPERM"
    if namespaces and not str(applied["namespaces"]).startswith("denied"):
        assert seen["pid"] == 1 and seen["signal_outside"] == "ESRCH"
    elif "signals only inside" in str(applied["landlock"]):
        assert seen["signal_outside"] == "EPERM"
    else:  # the audit hook and the orchestrator's checks remain; the trace says why
        assert not namespaces or applied["namespaces"].startswith("denied")


def test_a_solutions_compiler_caches_are_its_own_and_go_with_it(tmp_path):
    """A cache shared by solutions (or kept for the next run) would let one plant compiled kernels that a
    later solution loads; only the trusted reference keeps its caches across runs."""
    from solbench.orchestrator.process import sandbox_env

    seen = {}
    for role in ("solution", "reference"):
        scratch = tmp_path / role
        scratch.mkdir()
        env: dict[str, str] = {}
        sandbox_env(env, str(scratch), role)
        seen[role] = [env[k] for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "TMPDIR")]
    assert all(path.startswith(str(tmp_path / "solution") + os.sep) for path in seen["solution"])
    assert not any(path.startswith(str(tmp_path)) for path in seen["reference"])


BUILD_INSIDE = r'''
import errno, json, sys
from solbench.worker import sandbox
sandbox.enter_from_env()
from solbench.languages.cuda_cpp import cache_root
root = cache_root() / "0123456789abcdef"
try:
    root.mkdir(parents=True, exist_ok=True)
    made = "made"
except OSError as exc:
    made = errno.errorcode[exc.errno]
print(json.dumps({"root": str(root), "made": made, "landlock": str(sandbox.APPLIED.get("landlock"))}))
'''


def test_a_solution_builds_its_cuda_extension_in_its_own_cache_whatever_the_orchestrator_was_told(tmp_path):
    """A compiled solution's build folder must be somewhere its sandbox lets it write, on a machine that never
    built anything before (seen on a fresh H100: every .cu solution failed to load, its build folder under
    ~/.cache denied by Landlock), and nowhere another solution's process could have planted a library."""
    from solbench.orchestrator.process import sandbox_env

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    shared = tmp_path / "shared_cache"  # where the orchestrator's own SOLBENCH_CACHE points: not the worker's
    env = repo_env(REPO, SOLBENCH_CACHE=str(shared), HOME=str(tmp_path / "home"))
    sandbox_env(env, str(scratch), "solution")
    out = subprocess.run([sys.executable, "-P", "-c", BUILD_INSIDE], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["root"].startswith(str(scratch) + os.sep) and seen["made"] == "made", seen
    assert not shared.exists() and not (tmp_path / "home").exists()
