"""Root without powers, and nothing a worker starts outliving it (issue 32), as root and as an ordinary
user, for CPU workers (a PID namespace) and GPU workers (none: a cgroup, else seccomp and the
orchestrator's stop-and-kill of the worker's tree). Real processes and the real sandbox
(worker/sandbox.py); this machine runs the tests as root, and the ordinary user is `nobody`, switched to
in the child before the sandbox is entered (the interpreter and its modules are loaded first: the
Python installation may sit below a folder that user cannot read)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.anticheat.attempts import ATTEMPT
from tests.child_env import repo_env

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
DAEMON_ARG = "913.25"

PRELUDE = r'''
import ctypes, errno, json, os, signal, socket, stat, subprocess, sys, threading, time
from solbench.worker import capabilities, sandbox
args = json.loads(sys.argv[1])
if args["uid"] != 0:  # an ordinary user: everything loaded, then root is given up for good
    os.setgroups([])
    os.setresgid(args["uid"], args["uid"], args["uid"])
    os.setresuid(args["uid"], args["uid"], args["uid"])
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, as for a process the user started itself
sandbox.enter_from_env()
libc = ctypes.CDLL(None, use_errno=True)


''' + ATTEMPT + r'''


def clone_parent():
    pid = libc.syscall(56, 0x8000 | signal.SIGCHLD, 0, 0, 0, 0)  # clone(CLONE_PARENT | SIGCHLD): a sibling
    if pid == 0:
        os._exit(0)
    return pid
'''

HOSTILE = PRELUDE + r'''
scratch = args["scratch"]
out = {"applied": sandbox.APPLIED, "caps": capabilities.held()}
out["block_device"] = attempt(lambda: os.open(args["block"], os.O_WRONLY)) if args["block"] else "none here"
out["dev_full"] = attempt(lambda: os.open("/dev/full", os.O_WRONLY))  # not a GPU runtime node
out["mknod"] = attempt(lambda: os.mknod(os.path.join(scratch, "mem"), 0o600 | stat.S_IFCHR, os.makedev(1, 1)))
out["mount"] = attempt(lambda: libc.mount(b"none", scratch.encode(), b"tmpfs", ctypes.c_ulong(0), None))
out["raw_socket"] = attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close())
out["ptrace_other_user"] = attempt(lambda: libc.ptrace(16, args["other_pid"], None, None))  # PTRACE_ATTACH
out["stop_reference"] = attempt(lambda: os.kill(args["reference_pid"], signal.SIGSTOP))
out["clone_parent"] = attempt(clone_parent) if sys.platform == "linux" and os.uname().machine == "x86_64" else "EPERM"
out["clone3"] = attempt(lambda: libc.syscall(435, None, 0))
# what legitimate work needs, still there
box = []
t = threading.Thread(target=lambda: box.append(1))
t.start(); t.join()
out["thread"] = "ok" if box else "failed"
out["subprocess"] = attempt(lambda: subprocess.run(["/bin/true"], check=True) and None)
out["dev_null"] = attempt(lambda: open("/dev/null", "w").write("x"))
out["dev_shm"] = attempt(lambda: (open(f"/dev/shm/sb-{os.getpid()}", "w").close(), os.unlink(f"/dev/shm/sb-{os.getpid()}")))
print(json.dumps(out))
'''

DAEMON = PRELUDE + r'''
# A daemon in its own session (double fork, setsid), and a sibling of the worker if clone lets it.
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", args["daemon"]])
    os._exit(0)
os.wait()
sibling = libc.syscall(56, 0x8000 | signal.SIGCHLD, 0, 0, 0, 0) if os.uname().machine == "x86_64" else -1
if sibling == 0:
    os.setsid()
    os.execv("/bin/sleep", ["sleep", args["daemon"]])
print(json.dumps({"applied": sandbox.APPLIED}), flush=True)
time.sleep(600)
'''


def processes_with(arg: str) -> list[int]:
    """Running processes (zombies aside) whose command line holds `arg`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if arg.encode() in cmdline and state != "Z":
            found.append(int(pid))
    return found


def need_root() -> None:
    if os.getuid() != 0:
        pytest.skip("these cases switch between root and an ordinary user: they need to start as root")


def private_folder(tmp_path: Path, uid: int) -> Path:
    """A scratch folder the worker's user owns, below a folder every user can cross."""
    os.chmod(tmp_path, 0o755)
    for parent in tmp_path.parents:  # pytest's base folder is private to root
        if parent == Path("/tmp") or parent == parent.parent:
            break
        os.chmod(parent, os.stat(parent).st_mode | 0o111)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.chown(scratch, uid, uid)
    return scratch


def start_worker(script: str, tmp_path: Path, uid: int, *, namespaces: bool, use_cgroup: bool, **extra):
    """The worker as the orchestrator starts it (orchestrator/process.py): its own cgroup where asked and
    possible, the sandbox's environment, a new session."""
    from solbench.orchestrator import cgroup
    from solbench.orchestrator.process import sandbox_env

    need_root()
    scratch = private_folder(tmp_path, uid)
    group, why = cgroup.make("test") if use_cgroup and uid == 0 else (None, "not asked for")
    env = repo_env(REPO, TMPDIR=str(scratch))
    sandbox_env(env, str(scratch), "solution", namespaces=namespaces, cgroup=group or f"denied: {why}")
    for folder in json.loads(env["SOLBENCH_SANDBOX"])["writable"]:
        for root, dirs, _ in os.walk(folder):
            for d in [root, *(os.path.join(root, x) for x in dirs)]:
                os.chown(d, uid, uid)
    args = {"uid": uid, "scratch": str(scratch), **extra}
    proc = subprocess.Popen([sys.executable, "-P", "-c", script, json.dumps(args)], env=env, cwd=str(scratch),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    return proc, group


USERS = [pytest.param(0, id="root"), pytest.param(NOBODY, id="ordinary_user")]
WORKERS = [pytest.param(True, id="cpu_worker"), pytest.param(False, id="gpu_worker")]


@pytest.mark.parametrize("uid", USERS)
@pytest.mark.parametrize("namespaces", WORKERS)
def test_a_worker_has_no_powers_and_reaches_nothing_outside(tmp_path, uid, namespaces):
    need_root()
    other = subprocess.Popen(["sleep", "120"], user=4242)  # another user's process
    reference = subprocess.Popen(["sleep", "120"])  # stands for the reference worker, a sibling
    block = next((f"/dev/{name}" for name in ("loop0", "sda", "vda", "nvme0n1") if os.path.exists(f"/dev/{name}")),
                 "")
    try:
        proc, group = start_worker(HOSTILE, tmp_path, uid, namespaces=namespaces, use_cgroup=not namespaces,
                                   other_pid=other.pid, reference_pid=reference.pid, block=block)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        for p in (other, reference):
            p.kill()
            p.wait()
    from solbench.orchestrator import cgroup

    cgroup.kill(group)
    assert proc.returncode == 0, stderr[-2000:]
    seen = json.loads(stdout.strip().splitlines()[-1])
    applied = seen.pop("applied")
    assert not any(seen.pop("caps").values()) or uid != 0, applied["capabilities"]
    assert str(applied["capabilities"]).startswith(("all cleared", "none held")), applied
    assert str(applied["landlock"]).startswith("writes only"), applied  # this machine has Landlock
    assert seen["block_device"] in ("EACCES", "EPERM", "none here"), seen
    assert seen["dev_full"] == "EACCES" and seen["mknod"] == "EPERM" and seen["mount"] == "EPERM", seen
    assert seen["raw_socket"] == "EPERM" and seen["ptrace_other_user"] in ("EPERM", "ESRCH"), seen
    assert seen["stop_reference"] in ("EPERM", "ESRCH"), seen
    assert seen["clone_parent"] in ("EPERM", "EINVAL") and seen["clone3"] == "ENOSYS", seen
    assert all(seen[k] == "ok" for k in ("thread", "subprocess", "dev_null", "dev_shm")), seen


@pytest.mark.parametrize("uid", USERS)
@pytest.mark.parametrize("mechanism", ["pid_namespace", "cgroup", "seccomp_and_tree_kill"])
def test_nothing_a_worker_starts_outlives_it(tmp_path, uid, mechanism):
    from solbench.orchestrator import cgroup
    from solbench.orchestrator.process_tree import kill_tree

    if mechanism == "cgroup" and uid != 0:
        pytest.skip("an ordinary user gets no cgroup of its own here (no delegation): the next mechanism holds")
    proc, group = start_worker(DAEMON, tmp_path, uid, namespaces=mechanism == "pid_namespace",
                               use_cgroup=mechanism == "cgroup", daemon=DAEMON_ARG)
    if mechanism == "cgroup" and group is None:
        proc.kill()
        proc.wait()
        pytest.skip(f"no cgroup v2 group can be made here ({cgroup.make('probe')[1]}): the seccomp case covers it")
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()[-2000:]
        applied = json.loads(line)["applied"]
        expected = {"pid_namespace": "pid namespace", "cgroup": "cgroup",
                    "seccomp_and_tree_kill": "seccomp and subreaper"}[mechanism]
        assert applied["contained_by"].startswith(expected), applied
        deadline = time.monotonic() + 30
        while not processes_with(DAEMON_ARG) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(DAEMON_ARG), "the daemon never started"
        # Each mechanism alone: the worker's SIGKILL (a PID namespace ends with its first process), its
        # group's cgroup.kill, or the stop-and-kill of its tree (WorkerProcess._kill does all three).
        if mechanism == "pid_namespace":
            proc.kill()
        elif mechanism == "cgroup":
            Path(group, "cgroup.kill").write_text("1")
        else:
            kill_tree(proc.pid)
        proc.wait(timeout=30)
        cgroup.kill(group)
        deadline = time.monotonic() + 10
        while processes_with(DAEMON_ARG) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not processes_with(DAEMON_ARG), "a process the worker started outlived it"
    finally:
        for pid in processes_with(DAEMON_ARG):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
