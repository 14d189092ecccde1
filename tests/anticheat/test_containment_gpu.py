"""On a GPU worker (no PID namespace), a full `solbench run` as root and as an ordinary user: the
solution's double-forked daemon and its CLONE_PARENT sibling are gone after the run, a correct solution
still passes, and the trace says which mechanism held (issue 32). Needs a CUDA GPU (`gpu` marker)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.anticheat.test_containment import NOBODY, need_root, private_folder, processes_with
from tests.child_env import repo_env

REPO = Path(__file__).resolve().parents[2]
DAEMON_ARG = "877.75"
ESCAPER = f'''# solbench: problem=axpy_fp32
import ctypes, os, signal

if os.fork() == 0:  # a daemon in its own session
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "{DAEMON_ARG}"])
    os._exit(0)
os.wait()
if ctypes.CDLL(None).syscall(56, 0x8000 | signal.SIGCHLD, 0, 0, 0, 0) == 0:  # a sibling of the worker
    os.setsid()
    os.execv("/bin/sleep", ["sleep", "{DAEMON_ARG}"])


def run(x, y):
    return x * 2.0 + y
'''
GOOD = "# solbench: problem=axpy_fp32\ndef run(x, y):\n    return x * 2.0 + y\n"


@pytest.mark.gpu
@pytest.mark.parametrize("uid", [pytest.param(0, id="root"), pytest.param(NOBODY, id="ordinary_user")])
def test_nothing_a_gpu_solution_starts_outlives_the_run(tmp_path, uid):
    from tests.runner.conftest import write_problem

    need_root()
    folder = private_folder(tmp_path, uid)
    problem = write_problem(folder / "problems")
    (folder / "escaper.py").write_text(ESCAPER)
    (folder / "good.py").write_text(GOOD)
    # Every folder the run writes, inside the user's own: the session's private state, SOL cache and runs
    # folders (tests/conftest.py) belong to root, and an ordinary user's run stopped at its first trace key.
    writable = {name: folder / sub for name, sub in (("SOLBENCH_STATE_DIR", "state"), ("SOLBENCH_SOL_CACHE", "sol-cache"),
                                                     ("SOLBENCH_RUNS_DIR", "runs"))}
    for path in writable.values():
        path.mkdir()
    env = repo_env(REPO, HOME=str(folder), XDG_STATE_HOME=str(folder / "state"), XDG_CACHE_HOME=str(folder / "cache"),
                   **{name: str(path) for name, path in writable.items()})
    prefix = []
    if uid != 0:
        for root, dirs, files in os.walk(folder):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.chown(name, uid, uid)
        setpriv = shutil.which("setpriv")
        prefix = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if setpriv else []
        probe = subprocess.run([*prefix, sys.executable, "-c", "import torch"], env=env, capture_output=True)
        if not prefix or probe.returncode != 0:
            pytest.skip("an ordinary user cannot run this Python here (setpriv missing or the interpreter unreadable)")
        gpu = subprocess.run([*prefix, sys.executable, "-c", "import torch; assert torch.cuda.is_available()"],
                             env=env, capture_output=True, text=True)
        if gpu.returncode != 0:  # outside any sandbox: the machine's device nodes, not solbench's doing
            pytest.skip(f"an ordinary user cannot use the GPU here at all: {gpu.stderr.strip()[-300:]}")
    result = subprocess.run([*prefix, sys.executable, "-m", "solbench", "run", str(problem), "--solution",
                             str(folder / "escaper.py"), "--solution", str(folder / "good.py"), "--device", "cuda",
                             "--max-workloads", "1", "--trials", "1", "--iters", "3", "--no-adaptive",
                             "--timing-rounds", "1", "--json", "-o", str(folder / "traces.jsonl")],
                            cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    try:
        time.sleep(1)
        assert not processes_with(DAEMON_ARG), "a process the solution started outlived the run"
        assert (folder / "traces.jsonl").is_file(), f"exit {result.returncode}, no traces: {result.stderr[-3000:]}"
        traces = [json.loads(line) for line in (folder / "traces.jsonl").read_text().splitlines() if line.strip()]
        by_name = {t["solution"]: t for t in traces}
        assert by_name["good"]["evaluation"]["status"] == "PASSED", result.stderr[-3000:]
        sandbox = by_name["good"]["evaluation"]["environment"]["sandbox"]
        assert sandbox["contained_by"].startswith(("cgroup", "seccomp")), sandbox
        assert sandbox["capabilities"].startswith(("all cleared", "none held")), sandbox
        print(f"uid {uid}: contained_by = {sandbox['contained_by']}; escaper: {by_name['escaper']['evaluation']['status']}")
    finally:
        for pid in processes_with(DAEMON_ARG):
            os.kill(pid, 9)
