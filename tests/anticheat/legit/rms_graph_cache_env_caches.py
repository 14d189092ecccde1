"""Legitimate (agent style), the pattern of the solutions behind issue 21's false accusations: compiler
caches redirected at import (a fresh per-process TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR,
TRITON_PTXAS_PATH set to the ptxas that Triton ships, or the CUDA toolkit's, found at import), and a
Triton kernel inside a CUDA-graph cache keyed by `data_ptr()`, re-captured whenever the addresses
change. A fresh process (solbench restarts the worker when its own capture fails) compiles
everything again, starting ptxas as a child process inside a timed call: slow, not cheating.
"""
# solbench: problem=ac_rmsnorm
# expect: PASSED
# device: gpu
import os
import shutil
import tempfile

import torch
import triton
import triton.language as tl


def _find_ptxas() -> str | None:
    bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    if os.access(bundled, os.X_OK):
        return bundled
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = os.path.join(cuda_home, "bin", "ptxas")
    return candidate if os.access(candidate, os.X_OK) else shutil.which("ptxas")


_CACHE_ROOT = tempfile.mkdtemp(prefix="rmsnorm_agent_")
os.environ["TRITON_CACHE_DIR"] = os.path.join(_CACHE_ROOT, "triton")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_CACHE_ROOT, "inductor")
_PTXAS = _find_ptxas()
if _PTXAS:
    os.environ["TRITON_PTXAS_PATH"] = _PTXAS

_GRAPHS: dict = {}


@triton.jit
def _rmsnorm_row(x_ptr, w_ptr, out_ptr, hidden, EPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * hidden + cols, mask=mask, other=0.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / hidden + EPS)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * hidden + cols, x * rstd * w, mask=mask)


def _launch(x, weight, out):
    n_rows, hidden = x.shape
    _rmsnorm_row[(n_rows,)](x, weight, out, hidden, EPS=1e-6, BLOCK=triton.next_power_of_2(hidden))


def run(x, weight):
    x = x.contiguous()
    key = (x.data_ptr(), weight.data_ptr(), tuple(x.shape))
    if key not in _GRAPHS:
        static_out = torch.empty_like(x)
        _launch(x, weight, static_out)  # warm-up (compiles on a new shape)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _launch(x, weight, static_out)
        _GRAPHS[key] = (graph, static_out)
    graph, static_out = _GRAPHS[key]
    graph.replay()
    return static_out.clone()
