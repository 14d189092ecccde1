"""The set of core-aten operators a reference runs: what "problem A contains problem B" compares.

Two references that compute the same thing can reach the dispatcher at different levels: a fused
`scaled_dot_product_attention` against a hand-written `softmax(q @ k^T) @ v`, `F.layer_norm` against
its mean/var/rsqrt spelled out. `OpSetRecorder` is a dispatch mode that puts every op on one level,
**core aten** (`torch._decomp.core_aten_decompositions()`, the operator set `torch.export` lowers to
for backends): an op with a core-aten decomposition is replaced by it (recursively, under the same
mode), and only what is left is recorded. A few equal computations that core aten still spells apart
are recorded alike (`RECORDED_AS`: matrix products of any batching are `mm`, softmax is its arithmetic,
and so on; `NORMALISATIONS` and GELU are decomposed too). The reference runs through the speed-of-light tracer
(`capture.run_capture`: meta tensors, custom inputs, invented values where data is asked for), so a
reference `solbench sol` can price is one whose op set can be recorded.

Recorded names are op packets with in-place forms folded into their functional form (`add_` ->
`add`). Ops that only re-label or move memory are left out (`LAYOUT_OPS` and every aten view), since
whether a reference writes `.contiguous()`, `.to(dtype)` or `.reshape` says nothing about the
computation.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

# Ops that move or re-label memory, allocate, or read a scalar back: not part of an op set.
LAYOUT_OPS = frozenset({
    "_to_copy", "copy", "clone", "alias", "detach", "lift_fresh", "lift_fresh_copy", "_unsafe_view",
    "view", "_reshape_alias", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full",
    "scalar_tensor", "_local_scalar_dense", "resize", "set", "_assert_async", "_assert_scalar",
    "_functional_assert_async", "sym_constrain_range", "sym_size", "sym_stride", "sym_numel",
    "contiguous", "fill", "zero", "repeat", "constant_pad_nd",
})  # `repeat` is a broadcast made contiguous (`expand`, a view, + a copy); padding copies into a larger
# buffer (`F.pad` + a convolution and a convolution with `padding=` are one computation)

# Recorded as the computation they are, whatever form a reference wrote them in (one level, tested):
# - matrix products are `mm` however they are batched (`bmm`, an `einsum`, a loop of `F.linear`), with
#   a fused bias as the `add` it is (`addmm`);
# - softmax (and `_safe_softmax`, what the math attention path calls) is its arithmetic (`amax`, `sub`,
#   `exp`, `sum`, `div`), so a fused attention and a hand-written `exp(x - max) / sum` compare alike;
#   log-softmax likewise;
# - a reduction's values are `amax` / `amin` whether or not `max(dim)` also returned the indices;
# - a table lookup is `index` (`F.embedding`, `index_select`, `w[ids]`);
# - an accumulating scatter is `scatter_add` (`index_add_`, `index_put_(accumulate=True)`, `scatter_add`);
# - a variance is its arithmetic (`sub`, `mul`, `mean`), a square is a `mul` (`x ** 2` is `x * x`) and
#   a square root is `rsqrt` (`x / sqrt(v)` is `x * rsqrt(v)`), so a norm spelled out by hand and
#   `F.layer_norm` / `F.rms_norm` compare alike; an integer power is a product (`mul`);
# - a comparison is `compare` whichever way it faces (`x > 0` and `0 <= x` are one computation).
SOFTMAX = ("amax", "sub", "exp", "sum", "div")
RECORDED_AS = {"_safe_softmax": SOFTMAX, "_softmax": SOFTMAX, "_log_softmax": ("amax", "sub", "exp", "sum", "log"),
               "var_mean": ("sub", "mul", "mean"), "addmm": ("mm", "add"), "bmm": ("mm",), "embedding": ("index",),
               "index_select": ("index",), "scatter_add": ("scatter_add",), "index_add": ("scatter_add",),
               "var": ("sub", "mul", "mean"), "sqrt": ("rsqrt",)}
COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
REDUCTIONS_AS = {"max": "amax", "min": "amin"}  # their reducing overloads (not the binary max.other)
# Decomposed although core aten keeps them whole: normalisations, so that `F.layer_norm` and a layer norm
# spelled out in mean / var / rsqrt compare alike, and GELU, so that `F.gelu` and its formula do.
NORMALISATIONS = frozenset({"native_layer_norm", "native_group_norm", "native_batch_norm", "_fused_rms_norm",
                            "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "gelu"})

# Functions recorded whole, their dispatched ops left out: what they dispatch depends on how their inputs are
# held, not on the computation. `F.one_hot` of ids on the meta device is `eq(ids[..., None], arange)`; of real
# ids (a routing input the trace is given) a range check (`amin`, `amax`) and a `scatter`: the same one-hot
# recorded two ways, so a fused layer routing with its own top-k and an experts problem given the ids differed.
WHOLE = {torch.nn.functional.one_hot: "one_hot"}

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


def recorded_as(func, name: str, args: tuple, kwargs: dict) -> tuple[str, ...]:
    """The names an op is recorded as without decomposing it (see `RECORDED_AS`); () for the others."""
    if name in RECORDED_AS:
        return RECORDED_AS[name]
    if name in REDUCTIONS_AS and func._overloadname in ("default", "dim", "dim_max", "dim_min"):
        return (REDUCTIONS_AS[name],)
    if name == "index_put" and (kwargs.get("accumulate") or (len(args) > 3 and args[3])):
        return ("scatter_add",)
    if name in COMPARISONS:
        return ("compare",)
    if name == "pow" and len(args) > 1 and isinstance(args[0], torch.Tensor) and isinstance(args[1], (int, float)) \
            and float(args[1]).is_integer() and 2 <= args[1] <= 4:
        return ("mul",)
    if name == "div" and len(args) > 1 and isinstance(args[1], (int, float)) and not kwargs.get("rounding_mode"):
        return ("mul",)  # scaling by a constant: `x / c` is `x * (1 / c)`
    return ()


class OpSetRecorder(TorchDispatchMode):
    """Records the core-aten ops a computation dispatches (decomposing the others), then runs them.

    Stack it above the speed-of-light tracer: what it passes on is executed (and costed) there. Each op
    is also recorded apart when one of its operands depends on the reference's inputs (`data_ops`):
    tables and masks built from shapes alone (`arange`, a causal `triu`, a RoPE table from positions
    0..n) are constants a kernel may precompute, and a reference that builds them inline does no more
    work on its inputs than one that takes them ready-made.
    """

    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()
        self.data_counts: Counter = Counter()
        self.table = core_aten_decompositions()
        self.derived = WeakIdKeyDictionary()  # tensors that depend on an input (the tracer's view, kept
        self._tracer_derived = None  # up while it is suppressed inside a fused op)
        self._whole = _WholeFunctions(self)  # entered with this mode (`WHOLE`)
        self._quiet = 0  # > 0 inside a function recorded whole: its dispatched ops are not counted

    def __enter__(self):
        self._whole.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._whole.__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_name(func)
        on_data = self._on_data(args, kwargs)
        recorded = recorded_as(func, name, args, kwargs)
        if recorded:
            self._count(recorded, on_data)
            return self._mark(func(*args, **kwargs), on_data)
        decomposition = self.table.get(func)
        if decomposition is not None:
            before = self.counts.copy(), self.data_counts.copy()
            try:
                with self:  # the decomposition's own ops come back here, to be recorded or decomposed
                    result = decomposition(*args, **kwargs)
            except Exception:  # noqa: BLE001 - its Python checks refuse the trace's mix of meta and real
                result = NotImplemented  # tensors: the op is recorded whole, as core aten would not
            if result is not NotImplemented:
                return self._mark(result, on_data)
            self.counts, self.data_counts = before
        if not (func.is_view or name in LAYOUT_OPS):
            self._count((name,), on_data)
        return self._mark(func(*args, **kwargs), on_data)

    def _count(self, names: tuple[str, ...], on_data: bool) -> None:
        if self._quiet:
            return
        self.counts.update(names)
        if on_data:
            self.data_counts.update(names)

    def _on_data(self, args, kwargs) -> bool:
        if self._tracer_derived is None:
            from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

            self._tracer_derived = next((m.derived for m in _get_current_dispatch_mode_stack()
                                         if m is not self and hasattr(m, "derived")), WeakIdKeyDictionary())
        return any(isinstance(t, torch.Tensor) and (t in self.derived or t in self._tracer_derived)
                   for t in pytree.tree_leaves((args, kwargs)))

    def _mark(self, result, on_data: bool):
        if on_data:
            for t in pytree.tree_leaves(result):
                if isinstance(t, torch.Tensor):
                    self.derived[t] = True
        return result

    @property
    def ops(self) -> frozenset[str]:
        return frozenset(self.counts)

    @property
    def data_ops(self) -> frozenset[str]:
        return frozenset(self.data_counts)


class _WholeFunctions(TorchFunctionMode):
    """Records each `WHOLE` function as one op of its name (on data when an input is), quietly running it."""

    def __init__(self, recorder: OpSetRecorder):
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = WHOLE.get(func)
        if name is None:
            return func(*args, **kwargs)
        recorder = self.recorder
        on_data = recorder._on_data(args, kwargs)
        recorder._count((name,), on_data)
        recorder._quiet += 1
        try:
            result = func(*args, **kwargs)
        finally:
            recorder._quiet -= 1
        return recorder._mark(result, on_data)


@dataclass(frozen=True)
class OpSets:
    """Every op a reference runs (`all`), and those with an operand that depends on its inputs (`data`)."""

    all: frozenset[str]
    data: frozenset[str]


def record_op_sets(definition, axis_values: dict[str, int], scalars: dict | None = None) -> OpSets:
    """The core-aten op sets of one workload of `definition` (raises `CaptureError` when it cannot be traced)."""
    from solbench.sol.capture import run_capture  # torch-heavy; the import graph keeps it one way

    recorder = OpSetRecorder()
    axes = definition.resolve_axes(axis_values)
    run_capture(definition, axes, dict(scalars or {}), recorder=recorder)
    return OpSets(recorder.ops, recorder.data_ops)


def record_op_set(definition, axis_values: dict[str, int], scalars: dict | None = None) -> frozenset[str]:
    """Every core-aten op of one workload of `definition` (`record_op_sets(...).all`)."""
    return record_op_sets(definition, axis_values, scalars).all
