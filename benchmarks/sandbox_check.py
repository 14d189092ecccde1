"""Does real kernel work still run inside the worker's OS sandbox (worker/sandbox.py)? On a GPU machine:

    python3 benchmarks/sandbox_check.py

A child process enters the sandbox exactly as a worker does (private scratch and cache folders, the
environment `orchestrator/process.py` sets), then runs: a CUDA matmul, a Triton kernel (compiled, its
cache in the private folder), `torch.compile`, CUPTI's bindings if installed, nvcc, and writes that must fail
(the repository, the user's home, /dev/full), with no capability left. Prints one line per check and the mechanisms applied; exit 1 if any
check failed. On a CPU machine the CUDA checks say "skipped".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, os, sys
from solbench.worker import sandbox
sandbox.enter_from_env()
import torch
from solbench.worker import reads
unenforced = reads.restrict_for_load([])  # the read rules, as at a worker's first load (worker/reads.py)
results = {"applied": sandbox.APPLIED, "reads_warning": f"FAILED: {unenforced}" if unenforced else "none"}

def check(name, fn):
    try:
        results[name] = "ok: " + str(fn())[:120]
    except Exception as exc:  # noqa: BLE001 - reported
        results[name] = f"FAILED: {type(exc).__name__}: {str(exc)[:200]}"

def must_fail(path):
    try:
        open(path, "w").close()
    except OSError as exc:
        return f"refused ({exc.strerror})"
    os.unlink(path)
    raise RuntimeError(f"{path} was writable")

TRITON_SOURCE = """
import triton
import triton.language as tl


@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)
"""
cuda = torch.cuda.is_available()
check("write_repository", lambda: must_fail(os.path.join(sys.argv[1], "sandbox_probe.txt")))
check("write_home", lambda: must_fail(os.path.expanduser("~/sandbox_probe.txt")))
def must_not_read(path):
    try:
        open(path, "rb").close()
    except OSError as exc:
        return f"refused ({exc.strerror})"
    raise RuntimeError(f"{path} was readable")

check("read_repository", lambda: must_not_read(os.path.join(sys.argv[1], "pyproject.toml")))
check("read_parent_cmdline", lambda: must_not_read(f"/proc/{os.getppid()}/cmdline"))
check("write_dev_full", lambda: must_fail("/dev/full"))  # a device file outside the GPU runtime's list
from solbench.worker import capabilities
check("capabilities", lambda: "none effective" if not capabilities.held().get("CapEff") else 1 / 0)
check("write_scratch", lambda: open(os.path.join(os.environ["TMPDIR"], "x"), "w").close() or "written")
if cuda:
    check("cuda_matmul", lambda: float((torch.ones(256, 256, device="cuda") @ torch.ones(256, 256, device="cuda")).sum()))
    def triton_kernel():
        # Triton reads a kernel's source from its file: written into the scratch folder, as a solution is
        import importlib.util
        path = os.path.join(os.environ["TMPDIR"], "double_kernel.py")
        with open(path, "w") as f:
            f.write(TRITON_SOURCE)
        spec = importlib.util.spec_from_file_location("double_kernel", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        x = torch.ones(1000, device="cuda")
        module.double[(4,)](x, 1000, BLOCK=256)
        return float(x.sum())
    check("triton", triton_kernel)
    check("torch_compile", lambda: float(torch.compile(lambda t: (t * 2).relu().sum())(torch.ones(64, device="cuda"))))
    def cupti():
        from solbench.worker.cupti_activity import load_cupti
        return "bound" if load_cupti() else "not installed"
    check("cupti", cupti)
    def nvcc():
        import shutil, subprocess
        exe = shutil.which("nvcc") or (os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"))
        if not os.path.exists(exe):
            return "not installed"
        src = os.path.join(os.environ["TMPDIR"], "k.cu")
        with open(src, "w") as f:
            f.write("__global__ void k(float* x) { x[threadIdx.x] *= 2; }\n")
        subprocess.run([exe, "-c", src, "-o", src + ".o"], check=True, capture_output=True, timeout=300)
        return f"compiled {os.path.getsize(src + '.o')} bytes"
    check("nvcc", nvcc)
else:
    for name in ("cuda_matmul", "triton", "torch_compile", "cupti", "nvcc"):
        results[name] = "skipped: no CUDA device"
print(json.dumps(results))
'''


def main() -> int:
    from solbench.orchestrator import cgroup
    from solbench.orchestrator.process import run_folder, sandbox_env

    scratch = tempfile.mkdtemp(prefix="check_", dir=run_folder())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    group, why = cgroup.make("check")
    sandbox_env(env, scratch, "solution", namespaces=False, cgroup=group or f"denied: {why}")  # as a GPU worker
    try:
        out = subprocess.run([sys.executable, "-P", "-c", CHILD, str(REPO)], env=env, capture_output=True, text=True,
                             timeout=600)
    finally:
        cgroup.kill(group)
    if out.returncode != 0 or not out.stdout.strip():
        print(out.stdout[-3000:], out.stderr[-3000:])
        return 1
    results = json.loads(out.stdout.strip().splitlines()[-1])
    print("applied:", json.dumps(results.pop("applied")))
    for name, verdict in results.items():
        print(f"{name:16s} {verdict}")
    return 1 if any(v.startswith("FAILED") for v in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
