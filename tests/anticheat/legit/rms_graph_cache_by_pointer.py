"""Legitimate (agent style): a Triton kernel launched through the solution's own CUDA-graph cache, keyed
by the arguments' `data_ptr()` (and shape/stride): a graph is captured the first time a set of
addresses is seen, then replayed. solbench moves the arguments between calls, so this re-captures
often (slow, and the time counts), but every replay reads the current values at those addresses.
The cache knows nothing of an outer capture: inside solbench's own graph capture it replays (or
captures) its own graph there, which the outer capture may refuse; then solbench times the block as
launched, in a fresh process that compiles and captures everything again inside timed calls.
"""
# solbench: problem=ac_rmsnorm
# expect: PASSED
# device: gpu
from collections import OrderedDict

import torch
import triton
import triton.language as tl

_GRAPHS: OrderedDict = OrderedDict()
_MAX_GRAPHS = 64
_WARM: set = set()


@triton.jit
def _rmsnorm_row(x_ptr, w_ptr, out_ptr, stride_x, stride_out, hidden, EPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / hidden + EPS)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride_out + cols, x * rstd * w, mask=mask)


def _launch(x, weight, out):
    n_rows, hidden = x.shape
    _rmsnorm_row[(n_rows,)](x, weight, out, x.stride(0), out.stride(0), hidden, EPS=1e-6,
                            BLOCK=triton.next_power_of_2(hidden))


def run(x, weight, out):
    key = (x.data_ptr(), weight.data_ptr(), out.data_ptr(), tuple(x.shape), x.stride(), out.stride())
    graph = _GRAPHS.get(key)
    if graph is None:
        shape = tuple(x.shape)
        if shape not in _WARM:  # compile outside any capture, on a side stream, as the CUDA-graph docs say
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                _launch(x, weight, out)
            torch.cuda.current_stream().wait_stream(side)
            _WARM.add(shape)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _launch(x, weight, out)
        _GRAPHS[key] = graph
        while len(_GRAPHS) > _MAX_GRAPHS:
            _GRAPHS.popitem(last=False)
    else:
        _GRAPHS.move_to_end(key)
    graph.replay()
