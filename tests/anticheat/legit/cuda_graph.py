"""Legitimate: captures the computation in a CUDA graph once per shape (static input/output buffers)
and replays it on every call, copying the inputs in and the result out."""
# solbench: problem=ac_axpy
# expect: PASSED
# device: gpu
import torch

_graphs = {}


def run(x, y, out):
    key = (x.shape[0], x.device)
    if key not in _graphs:
        sx, sy, so = torch.empty_like(x), torch.empty_like(y), torch.empty_like(out)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up outside the capture, as the docs recommend
            torch.add(sy, sx, alpha=2.0, out=so)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            torch.add(sy, sx, alpha=2.0, out=so)
        _graphs[key] = (graph, sx, sy, so)
    graph, sx, sy, so = _graphs[key]
    sx.copy_(x)
    sy.copy_(y)
    graph.replay()
    out.copy_(so)
