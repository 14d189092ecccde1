"""Attack, in CuTe DSL: compute with a real CuTe kernel (compiled by CuTe DSL's MLIR pipeline inside the
worker's sandbox), but cache each answer by the inputs' addresses and replay it when an address comes back.

Caught: every call sees a fresh input set (fresh values, not only fresh addresses) and the sampled
timed outputs are verified; a replayed answer is wrong: INCORRECT_NUMERICAL.
"""
# solbench: problem=ac_axpy
# expect: INCORRECT_NUMERICAL
# device: gpu
# needs: cute_dsl
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def _axpy_kernel(mX: cute.Tensor, mY: cute.Tensor, mOut: cute.Tensor, n: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * 128 + tidx
    if i < n:
        mOut[i] = mX[i] * 2.0 + mY[i]


@cute.jit
def _axpy(mX: cute.Tensor, mY: cute.Tensor, mOut: cute.Tensor, n: cutlass.Int32, stream: cuda.CUstream):
    _axpy_kernel(mX, mY, mOut, n).launch(grid=((n + 127) // 128, 1, 1), block=(128, 1, 1), stream=stream)


_compiled = {}
_answers = {}


def run(x, y):
    key = (x.data_ptr(), y.data_ptr(), x.shape[0])
    if key in _answers:
        return _answers[key].clone()
    out = torch.empty_like(x)
    args = (from_dlpack(x), from_dlpack(y), from_dlpack(out), x.shape[0],
            cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    if x.shape[0] not in _compiled:
        _compiled[x.shape[0]] = cute.compile(_axpy, *args)
    _compiled[x.shape[0]](*args)
    _answers[key] = out.clone()
    return out
