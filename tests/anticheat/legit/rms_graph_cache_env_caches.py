"""Legitimate (agent style), the pattern of the solutions behind issue 21's false accusations: compiler
caches redirected at import (a fresh per-process TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR,
TRITON_PTXAS_PATH set to the ptxas that Triton ships, or the CUDA toolkit's, found at import), and a
Triton kernel inside a CUDA-graph cache keyed by the `data_ptr()` of the inputs and of the output it
allocates on every call (the caching allocator hands the same few blocks back, so the cache mostly
hits). Inside solbench's own capture the output comes from the graph pool at a new address: the
cache warms up with a device synchronize, which fails there, and solbench times the block as
launched in a fresh process. That process compiles everything again (its cache folder is new),
starting ptxas inside a timed call: slow, and the time counts, but not cheating.
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


_CACHE_ROOT = tempfile.mkdtemp(prefix="rmsnorm_agent_", dir=os.getcwd())  # new in every process
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
    out = torch.empty_like(x)
    key = (x.data_ptr(), weight.data_ptr(), out.data_ptr(), tuple(x.shape))
    graph = _GRAPHS.get(key)
    if graph is None:
        _launch(x, weight, out)  # warm-up (compiles on a new shape), then wait for it before capturing
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _launch(x, weight, out)
        _GRAPHS[key] = graph
    graph.replay()
    return out
