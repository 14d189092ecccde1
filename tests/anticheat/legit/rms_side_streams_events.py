"""Legitimate (agent style): the rows split over two side streams, forked from and joined back to the
caller's stream with CUDA events (record / wait_event), the output's memory marked with
record_stream for the allocator; a Triton kernel on each stream.
"""
# solbench: problem=ac_rmsnorm
# expect: PASSED
# device: gpu
import torch
import triton
import triton.language as tl

_STREAMS: list = []


@triton.jit
def _rmsnorm_row(x_ptr, w_ptr, out_ptr, hidden, EPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * hidden + cols, mask=mask, other=0.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / hidden + EPS)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * hidden + cols, x * rstd * w, mask=mask)


def run(x, weight):
    if not _STREAMS:
        _STREAMS.extend(torch.cuda.Stream() for _ in range(2))
    x = x.contiguous()
    n_rows, hidden = x.shape
    out = torch.empty_like(x)
    caller = torch.cuda.current_stream()
    ready = torch.cuda.Event()
    ready.record(caller)
    half = (n_rows + 1) // 2
    done = []
    for stream, (lo, hi) in zip(_STREAMS, ((0, half), (half, n_rows))):
        stream.wait_event(ready)
        with torch.cuda.stream(stream):
            if hi > lo:
                _rmsnorm_row[(hi - lo,)](x[lo:hi], weight, out[lo:hi], hidden, EPS=1e-6,
                                         BLOCK=triton.next_power_of_2(hidden))
            finished = torch.cuda.Event()
            finished.record(stream)
        done.append(finished)
        out.record_stream(stream)  # allocated on the caller's stream, written on this one
    for finished in done:
        caller.wait_event(finished)
    return out
