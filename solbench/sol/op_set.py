"""The set of core-aten operators a reference runs: what "problem A contains problem B" compares.

Two references that compute the same thing can reach the dispatcher at different levels: a fused
`scaled_dot_product_attention` against a hand-written `softmax(q @ k^T) @ v`, `F.layer_norm` against
its mean/var/rsqrt spelled out. `OpSetRecorder` is a dispatch mode that puts every op on one level,
**core aten** (`torch._decomp.core_aten_decompositions()`, the operator set `torch.export` lowers to
for backends), with normalisations decomposed as well (`NORMALISATIONS`, `RECORDED_AS`): an op with a core-aten decomposition is replaced by it (recursively, under the same
mode), and only what is left is recorded. The reference runs through the speed-of-light tracer
(`capture.run_capture`: meta tensors, custom inputs, invented values where data is asked for), so a
reference `solbench sol` can price is one whose op set can be recorded.

Recorded names are op packets with in-place forms folded into their functional form (`add_` ->
`add`). Ops that only re-label or move memory are left out (`LAYOUT_OPS` and every aten view), since
whether a reference writes `.contiguous()`, `.to(dtype)` or `.reshape` says nothing about the
computation.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Ops that move or re-label memory, allocate, or read a scalar back: not part of an op set.
LAYOUT_OPS = frozenset({
    "_to_copy", "copy", "clone", "alias", "detach", "lift_fresh", "lift_fresh_copy", "_unsafe_view",
    "view", "_reshape_alias", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full",
    "scalar_tensor", "_local_scalar_dense", "resize", "set", "_assert_async", "_assert_scalar",
    "_functional_assert_async", "sym_constrain_range", "sym_size", "sym_stride", "sym_numel",
    "contiguous", "fill", "zero",
})

# Recorded as the op they are, not decomposed: `_safe_softmax` (what the math attention path calls) is a
# softmax whose fully masked rows give 0; its decomposition's guards (`eq`, `any`, `where`) would make a
# fused attention look unlike a hand-written softmax attention.
# `var_mean` is both reductions. Normalisations (kept whole by core aten) are decomposed too, so that
# `F.layer_norm` and a layer norm spelled out in mean / var / rsqrt compare alike.
RECORDED_AS = {"_safe_softmax": ("_softmax",), "var_mean": ("var", "mean")}
NORMALISATIONS = frozenset({"native_layer_norm", "native_group_norm", "native_batch_norm", "_fused_rms_norm",
                            "_native_batch_norm_legit", "_native_batch_norm_legit_no_training"})

_DECOMPOSITIONS: dict | None = None


def core_aten_decompositions() -> dict:
    """torch's core-aten decomposition table (built once: it takes ~0.3 s)."""
    global _DECOMPOSITIONS
    if _DECOMPOSITIONS is None:
        from torch._decomp import core_aten_decompositions as table
        from torch._decomp import decomposition_table

        _DECOMPOSITIONS = dict(table())
        _DECOMPOSITIONS.update({op: fn for op, fn in decomposition_table.items()
                                if isinstance(op, torch._ops.OpOverload) and op_name(op) in NORMALISATIONS})
    return _DECOMPOSITIONS


def op_name(func) -> str:
    """Packet name with the in-place / out form folded into the functional one (`mul_` -> `mul`)."""
    name = func.overloadpacket.__name__
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


class OpSetRecorder(TorchDispatchMode):
    """Records the core-aten ops a computation dispatches (decomposing the others), then runs them.

    Stack it above the speed-of-light tracer: what it passes on is executed (and costed) there.
    """

    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()
        self.table = core_aten_decompositions()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_name(func)
        if name in RECORDED_AS:
            self.counts.update(RECORDED_AS[name])
            return func(*args, **kwargs)
        decomposition = self.table.get(func)
        if decomposition is not None:
            before = self.counts.copy()
            try:
                with self:  # the decomposition's own ops come back here, to be recorded or decomposed
                    result = decomposition(*args, **kwargs)
            except Exception:  # noqa: BLE001 - its Python checks refuse the trace's mix of meta and real
                result = NotImplemented  # tensors: the op is recorded whole, as core aten would not
            if result is not NotImplemented:
                return result
            self.counts = before
        if not (func.is_view or name in LAYOUT_OPS):
            self.counts[name] += 1
        return func(*args, **kwargs)

    @property
    def ops(self) -> frozenset[str]:
        return frozenset(self.counts)


def record_op_set(definition, axis_values: dict[str, int], scalars: dict | None = None) -> frozenset[str]:
    """The core-aten op set of one workload of `definition` (raises `CaptureError` when it cannot be traced)."""
    from solbench.sol.capture import run_capture  # torch-heavy; the import graph keeps it one way

    recorder = OpSetRecorder()
    axes = definition.resolve_axes(axis_values)
    run_capture(definition, axes, dict(scalars or {}), recorder=recorder)
    return recorder.ops
