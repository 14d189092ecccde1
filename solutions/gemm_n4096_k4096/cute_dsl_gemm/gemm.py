"""C = A @ B^T in CuTe DSL, the simplest correct way: one thread per output element, float32 accumulation.

An example of the language, not a fast GEMM: no tensor cores and no shared-memory tiling (the Triton and
CUTLASS examples show those). A 16 x 16 block of threads covers a 16 x 16 tile of C; each thread walks K.
Compiled once per M at the first call and launched on PyTorch's current stream.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

TILE = 16


@cute.kernel
def _gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, m: cutlass.Int32, n: cutlass.Int32,
                 k: cutlass.Int32):
    tx, ty, _ = cute.arch.thread_idx()
    bx, by, _ = cute.arch.block_idx()
    col = bx * TILE + tx
    row = by * TILE + ty
    if row < m and col < n:
        acc = cutlass.Float32(0.0)
        for i in range(k):
            acc = acc + mA[row, i].to(cutlass.Float32) * mB[col, i].to(cutlass.Float32)
        mC[row, col] = acc.to(cutlass.BFloat16)


@cute.jit
def _gemm(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, m: cutlass.Int32, n: cutlass.Int32,
          k: cutlass.Int32, stream: cuda.CUstream):
    grid = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE, 1)
    _gemm_kernel(mA, mB, mC, m, n, k).launch(grid=grid, block=(TILE, TILE, 1), stream=stream)


_compiled = {}


def run(A, B, C):
    m, k = A.shape
    n = B.shape[0]
    a, b, c = from_dlpack(A), from_dlpack(B), from_dlpack(C)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    key = (m, n, k)
    if key not in _compiled:
        _compiled[key] = cute.compile(_gemm, a, b, c, m, n, k, stream)
    _compiled[key](a, b, c, m, n, k, stream)
