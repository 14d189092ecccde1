"""The function-level mode that keeps a traced reference on meta tensors.

Factories and `.to(device)` / `.cuda()` never reach a real device; `scaled_dot_product_attention`
is costed as one op (its decomposition on meta would hide causal masking); `.tolist()` of small
input-dependent id vectors (the experts a batch routes to) yields every id, an upper estimate.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from solbench.sol.capture_data import CaptureError, MatmulEvent
from solbench.sol.meta_tracer import Tracer
from solbench.sol.value_tracking import DTYPE_BITS, band_fraction, dtype_family, is_float, torch_dtype_name

FACTORY_FUNCS = frozenset({
    torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.linspace, torch.logspace, torch.eye,
    torch.rand, torch.randn, torch.randint, torch.randperm, torch.tensor, torch.as_tensor, torch.empty_strided,
    torch.tril_indices, torch.triu_indices, torch.scalar_tensor, torch.normal,
})


# A recurrent layer checks its tensors' devices before dispatch and picks a CPU kernel (mkldnn_rnn_layer,
# no cost rule) when its input is real: small weights a custom-input entrypoint hands over real (Parakeet's
# prediction network) made the trace fail or go unpriced. On meta it decomposes into matmuls and gates.
RECURRENT_FUNCS = frozenset({torch.lstm, torch.gru, torch.rnn_tanh, torch.rnn_relu})

LITERAL_LIMIT = 1 << 16  # `torch.tensor(list)` of at most this many numbers stays real


class MetaRedirect(TorchFunctionMode):
    """Keeps everything on meta: factories and `.to(device)` never reach a real device; SDPA is
    costed as one op (its decomposition on meta would hide causal masking)."""

    def __init__(self, tracer: Tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.Tensor.cuda, torch.Tensor.cpu):
            return args[0]
        if func is torch.Tensor.to:
            args, kwargs = _strip_device(args, kwargs)
        elif func in (torch.tensor, torch.as_tensor) and self._literal(args):
            kwargs["device"] = torch.device("cpu")  # values written in the code (or built from real ones)
        elif func in FACTORY_FUNCS or "device" in kwargs:
            kwargs["device"] = torch.device("meta")
        t = args[0] if args else None
        if func is torch.Tensor.tolist and isinstance(t, torch.Tensor) and not self.tracer.is_real(t) \
                and t.dim() == 1 and not t.is_floating_point() and t.dtype != torch.bool and t.numel() <= 4096:
            # Ids a reference loops over (e.g. the experts a batch routes to): assume every one of
            # them is distinct and present, an upper estimate of the work, and say so.
            self.tracer.fabricated.append(f".tolist() of input-dependent ids {tuple(t.shape)}: assumed 0..{t.numel() - 1}")
            return list(range(t.numel()))
        if func in (torch.Tensor.tolist, torch.Tensor.numpy) and isinstance(args[0], torch.Tensor) \
                and not self.tracer.is_real(args[0]):
            raise CaptureError(f"the reference reads the values of an input-dependent tensor "
                               f"{tuple(args[0].shape)} with .{func.__name__}()")
        if func in (torch.Tensor.pin_memory, torch.Tensor.record_stream):
            return args[0]
        if func is F.scaled_dot_product_attention:
            return self._sdpa(func, args, kwargs)
        if func in RECURRENT_FUNCS:  # its kernel is picked by its tensors' device: on meta it decomposes
            args, kwargs = self._on_meta(args), self._on_meta(kwargs)
        return func(*args, **kwargs)

    def _on_meta(self, tree):
        """Real (small, custom-input) tensors as meta copies that count as the inputs they copy."""
        tracer = self.tracer

        def move(x):
            if not isinstance(x, torch.Tensor) or x.device.type == "meta":
                return x
            with tracer.suppressed():
                copy = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
            for table in (tracer.roots, tracer.derived, tracer.origin):
                if x in table:
                    table[copy] = table[x]
            return copy
        return pytree.tree_map(move, tree)

    def _literal(self, args) -> bool:
        """`torch.tensor(data)` of small Python data, before any value was invented: its values are
        known (offsets such as `cu_seqlens` built from lengths), so it stays real rather than meta."""
        if not args or isinstance(args[0], torch.Tensor) or self.tracer.fabricated:
            return False
        leaves = [x for x in _flatten(args[0])]
        return len(leaves) <= LITERAL_LIMIT and all(
            isinstance(x, (int, float, bool)) or (isinstance(x, torch.Tensor) and x.numel() == 1
                                                   and self.tracer.is_real(x)) for x in leaves)

    def _sdpa(self, func, args, kwargs):
        tracer = self.tracer
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
        bound = dict(zip(names, args))
        bound.update(kwargs)
        q, k, v = bound["query"], bound["key"], bound["value"]
        mask, causal = bound.get("attn_mask"), bool(bound.get("is_causal", False))
        lq, lk = q.shape[-2], k.shape[-2]
        batch = math.prod(q.shape[:-2])
        flops = 2.0 * batch * lq * lk * (q.shape[-1] + v.shape[-1])
        active = 1.0
        if causal:
            active = band_fraction(lq, lk, 0, lower=True)
        if isinstance(mask, torch.Tensor):
            if mask.dtype == torch.bool:
                nz = tracer.nonzero_fraction(mask)
                active = active * nz[0] if nz is not None else active
                if nz is None:
                    tracer.notes.append("SDPA mask depends on inputs: counted as dense")
            else:
                keep = tracer.mask_keep("add", (q, mask), {})
                active = active * keep if keep is not None else active
            tracer.note_access(mask)
        for t in (q, k, v):
            tracer.note_access(t)
        if tracer.recording and not tracer.suppress:
            origins = [o for o in (tracer.origin_of(t) for t in (q, k, v)) if o]
            dtype = max(origins, key=lambda o: DTYPE_BITS.get(dtype_family(o), 32)) if origins else torch_dtype_name(q.dtype)
            provable = mask is None or (not isinstance(mask, torch.Tensor)) or mask not in tracer.derived
            tracer.matmuls.append(MatmulEvent("scaled_dot_product_attention", flops, dtype, active,
                                              provable and all(t in tracer.derived for t in (q, k, v))))
            tracer.flops_other += 4.0 * batch * lq * lk * active
        with tracer.suppressed():
            out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor) and is_float(out.dtype):
            origins = [o for o in (tracer.origin_of(t) for t in (q, k, v)) if o]
            if origins:
                tracer.origin[out] = max(origins, key=lambda o: DTYPE_BITS.get(dtype_family(o), 32))
        return out


def _flatten(data):
    if isinstance(data, (list, tuple)):
        for x in data:
            yield from _flatten(x)
    else:
        yield data


def _strip_device(args, kwargs):
    """`t.to('cuda', torch.bfloat16)` -> `t.to(torch.bfloat16)`; a tensor argument gives only its dtype."""
    kwargs.pop("device", None)
    kept = [args[0]]
    for a in args[1:]:
        if isinstance(a, (str, torch.device, int)) and not isinstance(a, bool):
            continue
        if isinstance(a, torch.Tensor):
            kept.append(a.dtype)
            continue
        kept.append(a)
    return tuple(kept), kwargs
