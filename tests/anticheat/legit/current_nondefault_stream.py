"""Legitimate: makes a non-default stream current for its own work (the kernel is launched on
whatever stream is current), then hands the result back to the caller's stream."""
# solbench: problem=ac_axpy
# expect: PASSED
# device: gpu
import torch

_stream = []


def run(x, y):
    if not _stream:
        _stream.append(torch.cuda.Stream())
    caller = torch.cuda.current_stream()
    mine = _stream[0]
    mine.wait_stream(caller)
    with torch.cuda.stream(mine):
        assert torch.cuda.current_stream() == mine
        out = torch.add(y, x, alpha=2.0)
    caller.wait_stream(mine)
    out.record_stream(caller)
    return out
