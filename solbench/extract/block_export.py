"""Export one recorded block call: `torch.export`, non-strict, on the call's meta tensors, its variable
dimensions dynamic, so the emitted code is the graph the module runs and nothing the model around it adds."""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.utils import _pytree as pytree

from solbench.extract.capture import Call, quiet


class _Flat(nn.Module):
    """Calls a block with its recorded non-tensor arguments baked in and its tensors as positional inputs,
    so the export's inputs are exactly the call's tensors, in pytree order."""

    def __init__(self, block: nn.Module, call: Call):
        super().__init__()
        self.block = block
        self.leaves, self.tree = pytree.tree_flatten((call.args, call.kwargs))
        self.tensor_index = [i for i, x in enumerate(self.leaves) if isinstance(x, torch.Tensor)]

    def forward(self, *tensors):
        leaves = list(self.leaves)
        for index, tensor in zip(self.tensor_index, tensors):
            leaves[index] = tensor
        args, kwargs = pytree.tree_unflatten(leaves, self.tree)
        return self.block(*args, **kwargs)


def export_block(module: nn.Module, call: Call, dynamic: list[set[int]] | None):
    """`torch.export` of one module call (non-strict, meta tensors), variable dims dynamic.

    Parameter targets come back under `block.`; user inputs are the call's tensor leaves in order."""
    from torch.export import Dim

    flat = _Flat(module, call)
    tensors = tuple(flat.leaves[i] for i in flat.tensor_index)
    spec = None
    if dynamic is not None and any(dynamic):
        spec = ({d: Dim.AUTO for d in dynamic[i]} or None for i in flat.tensor_index)
        spec = {"tensors": tuple(spec)}
    with quiet(), _ScalarTensorsTraced(), _dispatch_cache(enabled=spec is None):
        return torch.export.export(flat, tensors, dynamic_shapes=spec, strict=False)


def _dispatch_cache(enabled: bool):
    """Fake tensors' dispatch cache, off for a dynamic export: there nearly every operation has a symbolic
    size in its arguments, so the cache hashes each call's arguments to find it cannot keep the result.
    Off, FLUX.1-dev's 134 exports took 11.6 s instead of 15.3 and Wan2.2's 208 took 39.5 s instead of 55.6
    (docs/extract.md, Speed). Static exports and the recording (fixed sizes) keep it: it halves a recording."""
    import torch._dynamo.config as dynamo_config

    if enabled or not hasattr(dynamo_config, "fake_tensor_cache_enabled"):
        return contextlib.nullcontext()
    return dynamo_config.patch(fake_tensor_cache_enabled=False)


class _ScalarTensorsTraced(torch.overrides.TorchFunctionMode):
    """`torch.tensor(0.95, device=x.device)` inside a forward (Gemma 3n's sparsity cut) becomes a constant
    export lifts out of the graph, and on the meta device its value is lost: the same tensor made by
    `torch.full` keeps the number in the graph, where the emitted code can spell it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.tensor and args and isinstance(args[0], (bool, int, float)) and len(args) == 1:
            value = args[0]
            dtype = kwargs.get("dtype") or (torch.get_default_dtype() if isinstance(value, float) else
                                            torch.bool if isinstance(value, bool) else torch.int64)
            return torch.full((), value, dtype=dtype, device=kwargs.get("device"))
        return func(*args, **kwargs)
