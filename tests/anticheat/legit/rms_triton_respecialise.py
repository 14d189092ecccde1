"""Legitimate (agent style): one program per row, the block size a constexpr chosen per shape
(`next_power_of_2(hidden)`), so every new hidden size compiles a new specialisation of the kernel on
its first call; a small per-shape table keeps the launch plan (block, warps) the agent worked out.
"""
# solbench: problem=ac_rmsnorm
# expect: PASSED
import triton
import triton.language as tl

_PLANS: dict[int, tuple[int, int]] = {}


@triton.jit
def _rmsnorm_row(x_ptr, w_ptr, out_ptr, stride_x, stride_out, hidden, EPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    mean_square = tl.sum(x * x, axis=0) / hidden
    rstd = 1.0 / tl.sqrt(mean_square + EPS)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride_out + cols, x * rstd * w, mask=mask)


def _plan(hidden: int) -> tuple[int, int]:
    if hidden not in _PLANS:
        block = triton.next_power_of_2(hidden)
        _PLANS[hidden] = (block, min(max(block // 256, 1), 16))
    return _PLANS[hidden]


def run(x, weight, out):
    n_rows, hidden = x.shape
    block, warps = _plan(hidden)
    _rmsnorm_row[(n_rows,)](x, weight, out, x.stride(0), out.stride(0), hidden, EPS=1e-6, BLOCK=block,
                            num_warps=warps)
