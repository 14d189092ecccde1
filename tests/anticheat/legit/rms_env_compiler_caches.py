"""Legitimate (agent style): compiler settings made at import, before Triton is imported: cache folders
for Triton and Inductor under the temporary directory, TRITON_PTXAS_PATH pointing at the real ptxas
(the one Triton ships, else the CUDA toolkit's) found at import; then an ordinary Triton kernel.
Environment writes of variables the harness does not control are warnings, never verdicts.
"""
# solbench: problem=ac_rmsnorm
# expect: PASSED
import importlib.util
import os
import shutil
import tempfile


def _real_ptxas() -> str | None:
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.origin:
        bundled = os.path.join(os.path.dirname(spec.origin), "backends", "nvidia", "bin", "ptxas")
        if os.access(bundled, os.X_OK):
            return bundled
    toolkit = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas")
    return toolkit if os.access(toolkit, os.X_OK) else shutil.which("ptxas")


_ROOT = os.path.join(tempfile.gettempdir(), f"agent_kernels_{os.getuid()}")
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_ROOT, "triton"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_ROOT, "inductor"))
if (_ptxas := _real_ptxas()) is not None:
    os.environ["TRITON_PTXAS_PATH"] = _ptxas

import torch  # noqa: E402 - after the environment, as the compilers read it when first used
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _rmsnorm_row(x_ptr, w_ptr, out_ptr, hidden, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * hidden + cols, mask=mask, other=0.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / hidden + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * hidden + cols, x * rstd * w, mask=mask)


def run(x, weight):
    x = x.contiguous()
    n_rows, hidden = x.shape
    out = torch.empty_like(x)
    _rmsnorm_row[(n_rows,)](x, weight, out, hidden, 1e-6, BLOCK=triton.next_power_of_2(hidden))
    return out
