"""Legitimate: splits the work over two side streams, and makes the caller's stream wait for both
before returning (with record_stream so the allocator knows)."""
# solbench: problem=ac_axpy
# expect: PASSED
# device: gpu
import torch

_streams = []


def run(x, y):
    if not _streams:
        _streams.extend([torch.cuda.Stream(), torch.cuda.Stream()])
    caller = torch.cuda.current_stream()
    out = torch.empty_like(x)
    half = x.shape[0] // 2
    for stream, (lo, hi) in zip(_streams, [(0, half), (half, x.shape[0])]):
        stream.wait_stream(caller)
        with torch.cuda.stream(stream):
            torch.add(y[lo:hi], x[lo:hi], alpha=2.0, out=out[lo:hi])
    for stream in _streams:
        caller.wait_stream(stream)
        out.record_stream(stream)
    return out
