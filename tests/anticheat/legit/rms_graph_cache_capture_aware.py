"""Legitimate (agent style): the same pointer-keyed CUDA-graph cache around a Triton kernel, written by
an agent that knew about outer captures: while the current stream is being captured (solbench timing
graph replays) it launches the kernel directly, so the outer graph records it; otherwise it replays
(or captures, for new addresses) its own graph. Value-returning: the graph writes a static buffer,
and the call returns a copy of it.
"""
# solbench: problem=ac_rmsnorm
# expect: PASSED
# device: gpu
import torch
import triton
import triton.language as tl

_GRAPHS: dict = {}
_COMPILED: set = set()


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
    if torch.cuda.is_current_stream_capturing():  # someone else's graph: just be part of it
        out = torch.empty_like(x)
        _launch(x, weight, out)
        return out
    key = (x.data_ptr(), weight.data_ptr(), tuple(x.shape))
    entry = _GRAPHS.get(key)
    if entry is None:
        if tuple(x.shape) not in _COMPILED:
            warm = torch.empty_like(x)
            _launch(x, weight, warm)  # compile eagerly first: a capture may not compile
            torch.cuda.synchronize()
            _COMPILED.add(tuple(x.shape))
        static_out = torch.empty_like(x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _launch(x, weight, static_out)
        entry = _GRAPHS[key] = (graph, static_out)
    graph, static_out = entry
    graph.replay()
    return static_out.clone()
