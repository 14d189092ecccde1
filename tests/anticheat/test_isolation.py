"""Submissions kept apart (issue 47, finding 2): a solution's worker reads only its runtime, its own
folders and its problem's data. A hostile solution run by a plain `solbench run` tries to read a fake
service's submissions and reference times beside its problem, the run's trace file, another problem's
folder, and other processes' `/proc/<pid>/cmdline` and `environ` (a token in a sleeper's environment); it
writes what it got into /dev/shm (a place its sandbox lets it write), where the test looks. Every attempt
must fail and no secret may appear anywhere it could carry it; the same solution computes honestly and
still PASSES. Real processes, the real sandbox (worker/sandbox.py, worker/reads.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.anticheat.suite import write_problem
from tests.anticheat.test_containment import NOBODY, need_root, private_folder, start_worker
from tests.child_env import repo_env

REPO = Path(__file__).resolve().parents[2]
SECRET = "TOKEN-" + uuid.uuid4().hex  # what the service and the other process hold; never the solution's

SNOOPER = '''# solbench: problem=ac_axpy
import errno, json, os

TARGETS = {targets!r}
REPORT = {report!r}


def attempt(path):
    try:
        with open(path, "rb") as f:
            return "read: " + f.read(4096).decode("utf-8", "replace")
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))


def snoop():
    seen = {{name: attempt(path) for name, path in TARGETS.items()}}
    seen["parent_cmdline"] = attempt(f"/proc/{{os.getppid()}}/cmdline")
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:  # a GPU worker may not list /proc
        pids = []
    for pid in pids:
        if int(pid) != os.getpid():
            got = attempt(f"/proc/{{pid}}/environ")
            if got.startswith("read"):
                seen[f"environ_{{pid}}"] = got
    seen["exists_traces"] = os.path.exists(TARGETS["traces"])
    with open(REPORT, "a") as f:
        f.write(json.dumps(seen) + "\\n")


def run(x, y):
    snoop()
    return x * 2.0 + y
'''


def service_folder(folder: Path) -> dict[str, str]:
    """A fake service's folder (world-readable files: only the sandbox may keep them from the worker)."""
    service = folder / "service"
    (service / "submissions").mkdir(parents=True)
    (service / "submissions" / "other-user.jsonl").write_text(json.dumps({"solution": SECRET}) + "\n")
    (service / "reference_timings.jsonl").write_text(json.dumps({"key": SECRET}) + "\n")
    other = service / "problems" / "someone_elses"
    other.mkdir(parents=True)
    (other / "definition.json").write_text(json.dumps({"reference": SECRET}))
    for root, dirs, files in os.walk(service):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.chmod(name, 0o755 if os.path.isdir(name) else 0o644)
    return {"submissions": str(service / "submissions" / "other-user.jsonl"),
            "reference_timings": str(service / "reference_timings.jsonl"),
            "other_problem": str(other / "definition.json"), "traces": str(service / "traces.jsonl")}


def judge_snooping(report: Path, trace_text: str, sleeper_pid: int) -> list[dict]:
    """Every attempt failed and no secret reached anything the solution could write."""
    assert report.is_file(), "the solution never ran"
    rounds = [json.loads(line) for line in report.read_text().splitlines()]
    assert SECRET not in report.read_text(), rounds[-1]
    assert SECRET not in trace_text
    for seen in rounds:
        leaked = {k: v for k, v in seen.items() if isinstance(v, str) and v.startswith("read") and
                  (k != "parent_cmdline" or v != "read: ")}  # a PID namespace's parent 0 has no entry
        assert not leaked, leaked
        assert seen["submissions"] in ("EACCES", "EPERM"), seen
        assert f"environ_{sleeper_pid}" not in seen
    assert any(seen["exists_traces"] and seen["traces"] in ("EACCES", "EPERM") for seen in rounds), rounds
    return rounds


def run_snooper(tmp_path: Path, uid: int, device: str) -> tuple[dict, list[dict]]:
    """`solbench run` of the snooper beside a fake service, as `uid`; (its trace, what it saw)."""
    need_root()
    folder = private_folder(tmp_path, uid)
    targets = service_folder(folder)
    problem = write_problem(folder / "service" / "problems", sizes=(64, 96))
    report = Path(f"/dev/shm/solbench-snoop-{uuid.uuid4().hex}.jsonl")
    (folder / "snooper.py").write_text(SNOOPER.format(targets=targets, report=str(report)))
    writable = {name: folder / sub for name, sub in (("SOLBENCH_STATE_DIR", "state"), ("SOLBENCH_SOL_CACHE", "sol"),
                                                     ("SOLBENCH_RUNS_DIR", "runs"))}
    for path in writable.values():
        path.mkdir()
    env = repo_env(REPO, HOME=str(folder), XDG_STATE_HOME=str(folder / "state"), XDG_CACHE_HOME=str(folder / "cache"),
                   **{name: str(path) for name, path in writable.items()})
    env.pop("SOLBENCH_SANDBOX", None)
    prefix: list[str] = []
    if uid != 0:
        for root, dirs, files in os.walk(folder):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.chown(name, uid, uid)
        setpriv = shutil.which("setpriv")
        prefix = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if setpriv else []
        probe = subprocess.run([*prefix, sys.executable, "-c", "import torch"], env=env, capture_output=True)
        if not prefix or probe.returncode != 0:
            pytest.skip("an ordinary user cannot run this Python here (setpriv missing or the interpreter "
                        "unreadable); test_read_rules_hold_for_each_user covers that user")
    sleeper = subprocess.Popen(["sleep", "300"], env={"SOLBENCH_TOKEN": SECRET}, user=uid)
    try:
        result = subprocess.run([*prefix, sys.executable, "-m", "solbench", "run", str(problem), "--solution",
                                 str(folder / "snooper.py"), "--device", device, "--max-workloads", "2",
                                 "--trials", "1", "--iters", "3", "--no-adaptive", "--timing-rounds", "1", "--json",
                                 "-o", targets["traces"]], cwd=folder, env=env, capture_output=True, text=True,
                                timeout=600)
        traces_file = Path(targets["traces"])
        assert traces_file.is_file(), f"exit {result.returncode}, no traces: {result.stderr[-3000:]}"
        text = traces_file.read_text()
        traces = [json.loads(line) for line in text.splitlines() if line.strip()]
        assert traces and all(t["evaluation"]["status"] == "PASSED" for t in traces), result.stderr[-3000:]
        rounds = judge_snooping(report, text + result.stdout + result.stderr, sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
        report.unlink(missing_ok=True)
    return traces[0], rounds


USERS = [pytest.param(0, id="root"), pytest.param(NOBODY, id="ordinary_user")]


@pytest.mark.parametrize("uid", USERS)
def test_a_cpu_solution_reads_nothing_of_the_service_or_other_processes(tmp_path, uid):
    trace, _ = run_snooper(tmp_path, uid, "cpu")
    sandbox = trace["evaluation"]["environment"]["sandbox"]
    assert sandbox["reads"].startswith("landlock"), sandbox
    assert sandbox["proc"].startswith("private /proc"), sandbox


HOSTILE_READS = r'''
import ctypes, errno, json, os, sys
import subprocess, time
from solbench.orchestrator.process_tree import children, running
from solbench.worker import reads, sandbox
args = json.loads(sys.argv[1])
reads.runtime_roots()  # sysconfig's lazy imports done while the interpreter's folder is readable
if args["uid"] != 0:  # everything loaded, then root given up for good
    os.setgroups([])
    os.setresgid(args["uid"], args["uid"], args["uid"])
    os.setresuid(args["uid"], args["uid"], args["uid"])
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)
sandbox.enter_from_env()
reads.restrict_for_load([args["data"]])


def attempt(path):
    try:
        with open(path, "rb") as f:
            return "read: " + f.read(200).decode("utf-8", "replace")
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))


out = {name: attempt(path) for name, path in args["targets"].items()}
out["parent_cmdline"] = attempt(f"/proc/{os.getppid()}/cmdline") if os.getppid() else "no parent in sight"
out["sleeper_cmdline"] = attempt(f"/proc/{args['sleeper']}/cmdline")
out["sleeper_environ"] = attempt(f"/proc/{args['sleeper']}/environ")
out["list_service"] = attempt(os.path.dirname(args["targets"]["submissions"]))
# what legitimate work needs
out["own_status"] = attempt("/proc/self/status")[:5]
out["own_thread"] = attempt(f"/proc/thread-self/stat")[:5]
out["data_blob"] = attempt(os.path.join(args["data"], "blob.bin"))
with open(os.path.join(args["scratch"], "mine.txt"), "w") as f:
    f.write("ok")
out["scratch"] = attempt(os.path.join(args["scratch"], "mine.txt"))
# Triton and Inductor publish a cache entry by renaming it from a temporary folder (Landlock says EXDEV to a
# rename across folders in any layer that does not grant it: seen on the GPU before the read layer did)
os.makedirs(os.path.join(args["scratch"], "tmp.1"), exist_ok=True)
os.makedirs(os.path.join(args["scratch"], "cache"), exist_ok=True)
with open(os.path.join(args["scratch"], "tmp.1", "kernel.so"), "w") as f:
    f.write("ok")
try:
    os.replace(os.path.join(args["scratch"], "tmp.1"), os.path.join(args["scratch"], "cache", "entry"))
    os.replace(os.path.join(args["scratch"], "mine.txt"), os.path.join(args["scratch"], "cache", "mine.txt"))
    out["rename_across_folders"] = "ok"
except OSError as exc:
    out["rename_across_folders"] = errno.errorcode.get(exc.errno, str(exc.errno))
out["cpuinfo"] = attempt("/proc/cpuinfo")[:5]
# the checkout solbench runs from: its package is readable, the rest of it (where a service folder may sit) not
out["checkout_file"] = attempt(os.path.join(args["repo"], "pyproject.toml"))
out["harness_file"] = attempt(os.path.join(args["repo"], "solbench", "spec", "__init__.py"))[:5]
if args["uid"] == 0:
    import xml.dom.minidom  # a module not imported before: found on sys.path past the checkout's folder
    out["late_import"] = "ok"
# the worker's own child watch (worker/threads.py) still tells a running child from a zombie
child = subprocess.Popen(["sleep", "30"])
out["child_running"] = [running(c) for c in children("self")]
child.kill()
for _ in range(100):
    if not running(child.pid):
        break
    time.sleep(0.05)
out["child_ended"] = not running(child.pid)
child.wait()
out["applied"] = {k: sandbox.APPLIED.get(k) for k in ("reads", "proc", "namespaces")}
print(json.dumps(out))
'''


@pytest.mark.parametrize("uid", USERS)
@pytest.mark.parametrize("namespaces", [pytest.param(True, id="cpu_worker"), pytest.param(False, id="gpu_worker")])
def test_read_rules_hold_for_each_user(tmp_path, uid, namespaces):
    """The kernel's part alone, cheaply, for both kinds of worker and both users: the worker's process enters
    the sandbox, then its read rules (as at a load, with one data root), then reads."""
    need_root()
    targets = service_folder(tmp_path)
    data = tmp_path / "service" / "problems" / "mine"
    data.mkdir()
    (data / "blob.bin").write_text("blob")
    os.chmod(data, 0o755)
    os.chmod(data / "blob.bin", 0o644)
    sleeper = subprocess.Popen(["sleep", "120"], env={"SOLBENCH_TOKEN": SECRET}, user=uid)
    try:
        proc, _ = start_worker(HOSTILE_READS, tmp_path, uid, namespaces=namespaces, use_cgroup=False,
                               targets=targets, data=str(data), sleeper=sleeper.pid, repo=str(REPO))
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode == 0, stderr[-2000:]
    assert SECRET not in stdout
    seen = json.loads(stdout.strip().splitlines()[-1])
    applied = seen.pop("applied")
    assert applied["reads"].startswith("landlock"), applied
    for name in ("submissions", "reference_timings", "other_problem", "sleeper_environ", "sleeper_cmdline",
                 "list_service"):
        assert seen[name] in ("EACCES", "EPERM", "ENOENT" if namespaces else "EACCES"), (name, seen[name], applied)
    assert not seen["parent_cmdline"].startswith("read"), seen
    assert seen["own_status"] == "read:" and seen["own_thread"] == "read:" and seen["cpuinfo"] == "read:", seen
    assert seen["data_blob"] == "read: blob" and seen["scratch"] == "read: ok", seen
    assert seen["rename_across_folders"] == "ok", seen
    assert applied["proc"].startswith("private" if namespaces else "landlock"), applied
    assert seen["checkout_file"] in ("EACCES", "EPERM") and seen["harness_file"] == "read:", seen
    assert uid != 0 or seen["late_import"] == "ok", seen
    assert seen["child_running"] == [True] and seen["child_ended"], seen


def blob_problem(root: Path) -> Path:
    """ac_axpy whose `y` is a tensor in the problem's own safetensors file."""
    import torch
    from safetensors.torch import save_file

    folder = write_problem(root, sizes=(64,))
    (folder / "blobs").mkdir()
    save_file({"y": torch.linspace(-1, 1, 64)}, str(folder / "blobs" / "y.safetensors"))
    line = json.loads((folder / "workload.jsonl").read_text())
    line["inputs"]["y"] = {"type": "safetensors", "path": "blobs/y.safetensors", "tensor_key": "y"}
    (folder / "workload.jsonl").write_text(json.dumps(line) + "\n")
    return folder


def test_problems_with_blobs_read_their_own_in_one_run(tmp_path):
    """Two problems whose inputs are blobs in their own folders, in one run: each solution and reference reads
    its problem's blobs (the reference worker, restricted to the first problem's folder, is replaced for the
    second), and both pass; a problem without blobs grants no folder at all."""
    from solbench.orchestrator.jobs import make_job
    from solbench.orchestrator.process import WorkerProcess
    from solbench.orchestrator.scheduler import run_jobs
    from solbench.spec.problem import load_problem
    from solbench.spec.solution import load_solution
    from tests.anticheat.suite import fast_config

    jobs = []
    for name in ("first", "second"):
        problem = load_problem(blob_problem(tmp_path / name))
        source = tmp_path / f"{name}.py"
        source.write_text("# solbench: problem=ac_axpy\ndef run(x, y):\n    return x * 2.0 + y\n")
        jobs.append(make_job(problem, load_solution(source, problem.definition), 1))
    traces = run_jobs(jobs, fast_config(), ["cpu"])
    assert [str(t.status) for t in traces] == ["PASSED", "PASSED"], [t.evaluation.log for t in traces]
    assert traces[0].evaluation.environment.sandbox["reads"].startswith("landlock")
    plain = load_problem(write_problem(tmp_path / "plain"))
    assert WorkerProcess.readable_roots(plain, [tmp_path / "plain"]) == []
    assert WorkerProcess.readable_roots(jobs[0].problem, [tmp_path / "first"]) == [str(tmp_path / "first")]


def test_a_kernel_without_landlock_is_said_so():
    """Where the kernel has no Landlock, the worker's trace warns and `solbench serve`'s line says so (a
    child process stands for such a kernel: its Landlock probe answers 0)."""
    script = ("import json\nfrom solbench.worker import reads, sandbox\nsandbox.landlock_abi = lambda: 0\n"
              "sandbox.APPLIED['pdeathsig'] = True\n"  # a worker: its enter_from_env recorded what it applied
              "warning = reads.restrict_for_load([])\n"
              "print(json.dumps([warning, sandbox.APPLIED, reads.enforced_here()]))")
    result = subprocess.run([sys.executable, "-P", "-c", script], env=repo_env(REPO), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    warning, applied, line = json.loads(result.stdout)
    assert "NOT ENFORCED" in warning and applied["reads"].startswith("NOT ENFORCED"), applied
    assert applied["proc"].startswith("NOT ENFORCED") and "NOT ENFORCED" in line, (applied, line)


def test_a_process_that_is_not_a_worker_is_never_restricted():
    """The worker's load runs in process in some tests (and tools): read rules there would lock the test
    runner itself out of its own temporary folders (seen on the H200: every later test errored)."""
    script = ("import json, os, tempfile\nfrom solbench.worker import reads, sandbox\n"
              "warning = reads.restrict_for_load([])\n"
              "folder = tempfile.mkdtemp()\nos.listdir(folder)\n"
              "print(json.dumps([warning, 'reads' in sandbox.APPLIED]))")
    result = subprocess.run([sys.executable, "-P", "-c", script], env=repo_env(REPO), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == [None, False]
