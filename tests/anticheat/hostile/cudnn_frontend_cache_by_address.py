"""Attack, in the cuDNN frontend: an axpy as a cuDNN element-wise graph (out = (x + x) + y)
built and run by cuDNN inside the worker's sandbox, but each answer cached by the inputs' addresses and
replayed when an address comes back.

Caught: every call sees a fresh input set (fresh values, not only fresh addresses) and the sampled
timed outputs are verified; a replayed answer is wrong: INCORRECT_NUMERICAL.
"""
# solbench: problem=ac_axpy
# expect: INCORRECT_NUMERICAL
# device: gpu
# needs: cudnn_frontend
import cudnn
import torch

_handle = None
_graphs = {}
_answers = {}


def _build(x3, y3):
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=_handle)
    x, y = graph.tensor_like(x3), graph.tensor_like(y3)
    out = graph.add(graph.add(x, x), y)
    out.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(list(x3.shape)).set_stride(list(x3.stride()))
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    workspace = torch.empty(max(graph.get_workspace_size(), 1), dtype=torch.uint8, device=x3.device)
    return graph, x, y, out, workspace


def run(x, y):
    global _handle
    key = (x.data_ptr(), y.data_ptr(), x.shape[0])
    if key in _answers:
        return _answers[key].clone()
    if _handle is None:
        _handle = cudnn.create_handle()
    x3, y3 = x.reshape(1, 1, -1), y.reshape(1, 1, -1)
    result = torch.empty_like(x3)
    if x.shape[0] not in _graphs:
        _graphs[x.shape[0]] = _build(x3, y3)
    graph, gx, gy, gout, workspace = _graphs[x.shape[0]]
    cudnn.set_stream(handle=_handle, stream=torch.cuda.current_stream().cuda_stream)
    graph.execute({gx: x3, gy: y3, gout: result}, workspace, handle=_handle)
    _answers[key] = result.reshape(-1).clone()
    return result.reshape(-1)
