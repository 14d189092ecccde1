"""The dispatch mode that runs a reference on meta tensors and records its work, op by op.

Every aten op runs on meta, or for real on the CPU when all its operands are real and small
(constants that depend on no input: masks, index tables, rotary tables), so their values are known.
When the reference asks for an input-dependent value (`.item()`, `nonzero`, boolean indexing, unique)
one is invented and recorded in `fabricated` (the capture is then approximate).

Per op it records: the elements read from each input (slices their region, gathers the rows
gathered, broadcasts their distinct elements), the elements written into inputs updated in place
(`inplace`), matmul-class events with their operand dtype, mask activity and provability, the
other FLOPs (`opcost`), and the names of ops it does not understand. `value_tracking` follows what is
known about values; `meta_redirect` keeps factories on meta and costs SDPA as one op.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from solbench.sol import inplace, opcost
from solbench.sol.capture_data import BudgetExceeded, CaptureError, InputUse, MatmulEvent, WallClockLimit
from solbench.sol.one_hot import OneHotRouting
from solbench.sol.routing import BalancedRouting
from solbench.sol.value_tracking import DTYPE_BITS, ValueTracking, dtype_family, is_float, torch_dtype_name

aten = torch.ops.aten

REAL_NUMEL_LIMIT = 1 << 24  # constants up to this many elements are computed for real on the CPU
REAL_MATMUL_FLOPS_LIMIT = 1e8
# The trace budget is deterministic, so a workload traces (or not) the same way on any machine and
# under any load: dispatched aten ops, and elements computed for real on the CPU (small constants).
MAX_OPS = 20_000  # per trace (reference, or custom-input entrypoint)
MAX_REAL_ELEMENTS = 1 << 30
# Last resort only (a single pathological op, a reference hanging in Python between ops); when it
# fires the result is reported as depending on wall time, never silently.
SAFETY_SECONDS = 300.0
# Not marked as views in aten, but they only reshape or re-label the same data.
VIEW_LIKE = frozenset({"detach", "alias", "lift_fresh", "_reshape_alias", "_unsafe_view", "squeeze", "unsqueeze",
                       "transpose", "t", "as_strided", "view_as_real", "view_as_complex", "resolve_conj", "resolve_neg"})
# Random float data only matters as data: big draws stay meta (random ints, e.g. routing, stay real).
RANDOM_FLOAT = frozenset({"randn", "rand", "normal", "uniform", "randn_like", "rand_like", "bernoulli",
                          "exponential", "cauchy", "log_normal"})
RANDOM_REAL_LIMIT = 1 << 16
# fp8 / fp4 dtypes: a tensor of one made inside the reference (quantisation) sets the solar byte width
LOW_PRECISION = frozenset(d for d in vars(torch).values()
                          if isinstance(d, torch.dtype) and str(d).startswith(("torch.float8", "torch.float4")))
UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})


def tensor_leaves(obj) -> list[torch.Tensor]:
    """The tensors in an op's arguments or outputs, in order (torch's pytree is 5x slower here)."""
    found: list[torch.Tensor] = []
    _collect(obj, found)
    return found


def _collect(obj, found: list) -> None:
    if isinstance(obj, torch.Tensor):
        found.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _collect(x, found)
    elif isinstance(obj, dict):
        for x in obj.values():
            _collect(x, found)


def _map_leaves(fn, obj):
    """`fn` applied to every leaf of nested lists, tuples and dicts (an op's arguments)."""
    if isinstance(obj, list):
        return [_map_leaves(fn, x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_map_leaves(fn, x) for x in obj)
    if isinstance(obj, dict):
        return {k: _map_leaves(fn, v) for k, v in obj.items()}
    return fn(obj)


class Tracer(OneHotRouting, BalancedRouting, ValueTracking, TorchDispatchMode):
    """Executes every aten op on meta (or for real, for small constants) and records its cost."""

    def __init__(self, max_ops: int | None = None, max_real_elements: int | None = None,
                 safety_seconds: float | None = None):
        super().__init__()
        self.roots = WeakIdKeyDictionary()  # tensor -> input name it views
        self.origin = WeakIdKeyDictionary()  # tensor -> narrowest float dtype its data came from
        self.active = WeakIdKeyDictionary()  # tensor -> fraction of elements not masked off
        self.producer = WeakIdKeyDictionary()  # tensor -> indices of matmul events it came from
        self.const_nz = WeakIdKeyDictionary()  # meta constant -> (nonzero fraction, value of nonzeros)
        self.tainted = WeakIdKeyDictionary()  # real tensors written with unknown values
        self.real_nz = WeakIdKeyDictionary()  # cache of nonzero fractions of real tensors
        self.derived = WeakIdKeyDictionary()  # tensors whose values depend on some input
        self.unknown_mask = WeakIdKeyDictionary()  # tensors masked by something input-dependent
        self.value_bound = WeakIdKeyDictionary()  # integer meta tensor -> its values lie in [0, bound)
        self.selected = WeakIdKeyDictionary()  # `ids == v` mask -> elements assumed selected (routing)
        self.one_hot = WeakIdKeyDictionary()  # one-hot routing mask -> (class dim, classes, ones, counts)
        self.counted = WeakIdKeyDictionary()  # `selected` masks whose count is known, not assumed
        self.zero_filled = WeakIdKeyDictionary()  # made by `zeros` (one_hot's scatter form starts from one)
        self.inputs: dict[str, InputUse] = {}
        self.matmuls: list[MatmulEvent] = []
        self.flops_other = 0.0
        self.low_precision: set[str] = set()  # fp8 / fp4 dtypes of tensors the reference made (quantisation)
        self.unknown: Counter = Counter()
        self.fabricated: list[str] = []
        self.notes: list[str] = []
        self.n_ops = 0
        self.max_ops = MAX_OPS if max_ops is None else max_ops
        self.real_elements = 0  # elements of outputs computed for real on the CPU
        self.max_real_elements = MAX_REAL_ELEMENTS if max_real_elements is None else max_real_elements
        self.safety_seconds = SAFETY_SECONDS if safety_seconds is None else safety_seconds
        self.deadline = time.monotonic() + self.safety_seconds
        self.suppress = 0
        self.recording = True

    @contextmanager
    def suppressed(self):
        """Ops inside are executed but not costed (their parent op was costed as a whole)."""
        self.suppress += 1
        try:
            yield
        finally:
            self.suppress -= 1

    # -- values ------------------------------------------------------------------------------

    def is_real(self, t: torch.Tensor) -> bool:
        return t.device.type != "meta" and t not in self.tainted

    def _fabricate_scalar(self, t: torch.Tensor):
        self.fabricated.append(f".item() of an input-dependent {torch_dtype_name(t.dtype)} tensor {tuple(t.shape)}")
        if t.dtype == torch.bool:
            return False
        if is_float(t.dtype):
            return 1.0
        return 1

    # -- dispatch ----------------------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten._local_scalar_dense.default:
            t = args[0]
            return func(t) if self.is_real(t) else self._fabricate_scalar(t)
        self.n_ops += 1
        self._check_budget()
        name = opcost.packet_name(func)
        tensors = tensor_leaves((args, kwargs))
        all_real = all(self.is_real(t) for t in tensors)
        if name in ("nonzero", "argwhere") and not all_real:
            t = args[0]
            out = torch.empty((self.nonzero_rows(name, t), t.dim()), dtype=torch.int64, device="meta")
            if t.dim():
                self.value_bound[out] = max(t.shape)
            return out
        if name == "_unique2" and not all_real:
            t = args[0]
            n = self.unique_count(t)
            values = torch.empty((n,), dtype=t.dtype, device="meta")
            if t in self.value_bound:
                self.value_bound[values] = self.value_bound[t]
            return (values, torch.empty(tuple(t.shape), dtype=torch.int64, device="meta"),
                    torch.empty((n,), dtype=torch.int64, device="meta"))
        counts = None if all_real else self.routed_counts(name, args, kwargs)
        if counts is not None:  # a routing mask's counts: known values under the balanced rule
            if self.recording:
                self._record(func, name, args, kwargs, [counts])
            return counts
        if name in ("index", "index_put", "_index_put_impl") and not all_real:
            args = self._bool_indices_as_long(name, args)
        if tensors and all_real and name not in opcost.MATMUL_OPS and all(
                t.numel() <= REAL_NUMEL_LIMIT for t in tensors):
            out = func(*args, **kwargs)  # small constants: real values (data-dependent ops work)
            self._count_real(func, name, out)
            self.track_one_hot(name, args, kwargs, tensor_leaves(out))
            if self.recording:
                self._record(func, name, args, kwargs,
                             tensor_leaves(out))
            return out
        m_args, m_kwargs = _map_leaves(self._to_meta, (args, kwargs))
        if "device" in m_kwargs:
            m_kwargs["device"] = torch.device("meta")
        try:
            out = func(*m_args, **m_kwargs)
        except Exception as exc:
            raise CaptureError(f"{func} failed on meta tensors: {type(exc).__name__}: {str(exc)[:200]}") from exc
        outs = tensor_leaves(out)
        if all_real and name not in UNINITIALISED and self._small(name, m_args, outs) and not (
                name in RANDOM_FLOAT and any(o.numel() > RANDOM_REAL_LIMIT for o in outs)):
            r_kwargs = dict(kwargs)
            if "device" in r_kwargs:
                r_kwargs["device"] = torch.device("cpu")
            out = func(*args, **r_kwargs)
            outs = tensor_leaves(out)
            self._count_real(func, name, outs)
        elif not all_real and func._schema.arguments and func._schema.arguments[0].is_write:
            first = args[0] if args else None
            if isinstance(first, torch.Tensor) and first.device.type != "meta":
                self.tainted[first] = True  # a real tensor got input-dependent values
        self.track_one_hot(name, args, kwargs, outs)
        if not all_real:
            self.track_bounds(name, func, args, kwargs, outs)
        if self.recording:
            self._record(func, name, args, kwargs, outs)
        return out

    def _check_budget(self) -> None:
        if self.n_ops > self.max_ops:
            raise BudgetExceeded(f"the reference runs more than {self.max_ops} ops on meta tensors "
                                 f"(a Python loop over data?)")
        if self.real_elements > self.max_real_elements:
            raise BudgetExceeded(f"the reference computes more than {self.max_real_elements} constant elements "
                                 f"for real on the CPU")
        if self.n_ops % 64 == 0 and time.monotonic() > self.deadline:
            raise WallClockLimit(f"wall-clock safety limit hit: the trace ran over {self.safety_seconds:.0f} s "
                                 f"within its op budget (this result depends on machine speed)")

    def _count_real(self, func, name: str, out) -> None:
        if not (func.is_view or name in VIEW_LIKE):  # views compute nothing
            self.real_elements += sum(o.numel() for o in tensor_leaves(out))

    def _bool_indices_as_long(self, name, args):
        """A boolean index on meta has an unknown number of hits: assume all, as long indices."""
        indices = args[1]
        if not any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices):
            return args
        new = []
        for i in indices:
            if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8):
                if self.is_real(i):
                    new.extend(i.nonzero().unbind(1))
                    continue
                self.fabricated.append(f"boolean indexing with an input-dependent mask {tuple(i.shape)}: "
                                       f"assumed all selected")
                new.extend([torch.empty(i.numel(), dtype=torch.int64, device="meta")] * i.dim())
            else:
                new.append(i)
        return (args[0], new, *args[2:])

    def _to_meta(self, a):
        if isinstance(a, torch.Tensor) and a.device.type != "meta":
            return a.to("meta")
        if isinstance(a, torch.device) and a.type != "meta":
            return torch.device("meta")
        return a

    def _small(self, name: str, m_args, outs) -> bool:
        if any(o.numel() > REAL_NUMEL_LIMIT for o in outs):
            return False
        if name in opcost.MATMUL_OPS:
            try:
                return opcost.MATMUL_OPS[name](m_args, outs[0]) <= REAL_MATMUL_FLOPS_LIMIT
            except Exception:
                return False
        return True

    # -- recording ---------------------------------------------------------------------------

    def add_input(self, name: str, t: torch.Tensor, declared_dtype: str) -> None:
        self.roots[t] = name
        self.derived[t] = True
        self.inputs[name] = InputUse(name, declared_dtype, t.numel())
        if is_float(t.dtype):
            self.origin[t] = declared_dtype

    def note_access(self, t: torch.Tensor, gathered_elements: int | None = None) -> None:
        root = self.roots.get(t)
        if root is None or self.suppress:
            return
        use = self.inputs[root]
        if gathered_elements is not None:
            use.gathered += gathered_elements
            return
        use.regions[(t.storage_offset(), tuple(t.shape), tuple(t.stride()))] = inplace.view_elements(t)

    def _record(self, func, name, args, kwargs, outs) -> None:
        if self.suppress:
            return
        tensor_args = tensor_leaves((args, kwargs))
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if any(t in self.derived for t in tensor_args):
            for o in outs:
                self.derived[o] = True
        if any(t in self.unknown_mask for t in tensor_args):
            for o in outs:
                self.unknown_mask[o] = True
        if func.is_view or name in VIEW_LIKE:
            self._propagate_view(first if first is not None else (tensor_args[0] if tensor_args else None), outs,
                                 func, args)
            return
        skip_read = self._note_writes(func, name, args, kwargs)
        self.low_precision.update(torch_dtype_name(o.dtype) for o in outs if o.dtype in LOW_PRECISION)
        for i, t in enumerate(tensor_args):
            if any(t is w for w in skip_read):
                continue
            if name in opcost.GATHER_OPS and t is first and outs:
                self.note_access(t, gathered_elements=min(t.numel(), outs[0].numel()))
            elif name == "embedding" and i == 0:
                self.note_access(t, gathered_elements=min(t.numel(), outs[0].numel()))
            else:
                self.note_access(t)
        if name in opcost.MATMUL_OPS:
            self._record_matmul(name, args, tensor_args, outs)
            return
        flops = opcost.other_flops(name, func, args, outs)
        if flops is None:
            self.unknown[name] += 1
            flops = 0.0
        self.flops_other += flops
        self._propagate_values(name, args, kwargs, tensor_args, outs)

    def _note_writes(self, func, name, args, kwargs) -> list[torch.Tensor]:
        """Record the elements written into inputs; returns the destinations not to count as read whole."""
        skip = []
        for position, t, is_out in inplace.written_arguments(func, args, kwargs):
            root = self.roots.get(t)
            reads = "none" if is_out else (inplace.reads_destination(name, args, kwargs) if position == 0 else "all")
            if reads != "all":
                skip.append(t)
            if root is None:
                continue
            use = self.inputs[root]
            region = (t.storage_offset(), tuple(t.shape), tuple(t.stride()))
            if position == 0 and name in inplace.INDEXED_WRITE_OPS:
                count = inplace.indexed_elements(name, args, kwargs, self.is_real)
                use.scattered += count
                if reads == "written":
                    use.gathered += count
                continue
            count = inplace.view_elements(t)
            if position == 0 and name in inplace.MASKED_WRITE_OPS:
                nz = self.nonzero_fraction(args[1]) if len(args) > 1 else None
                if nz is not None:
                    use.scattered += int(math.ceil(nz[0] * count))
                    continue
            use.written_regions[region] = count
        return skip

    def origin_of(self, t: torch.Tensor) -> str | None:
        o = self.origin.get(t)
        if o is not None:
            return o
        return torch_dtype_name(t.dtype) if is_float(t.dtype) and t.device.type == "meta" else None

    def _record_matmul(self, name, args, tensor_args, outs) -> None:
        idx = opcost.MATMUL_OPERANDS.get(name, (0, 1))
        operands = [args[i] for i in idx if i < len(args) and isinstance(args[i], torch.Tensor)]
        if name in ("_scaled_mm", "_scaled_grouped_mm", "_int_mm"):
            dtype = torch_dtype_name(operands[0].dtype)
        else:
            origins = [o for o in (self.origin_of(t) for t in operands) if o]
            dtype = max(origins, key=lambda o: DTYPE_BITS.get(dtype_family(o), 32)) if origins else \
                torch_dtype_name(operands[0].dtype)
        flops = opcost.MATMUL_OPS[name](args, outs[0])
        active = min([self.active.get(t, 1.0) for t in operands] or [1.0])
        provable = all(t in self.derived and t not in self.unknown_mask for t in operands)
        self.matmuls.append(MatmulEvent(name, float(flops), dtype, active, provable))
        if name in ("addmm", "baddbmm", "addbmm", "addmv", "_addmm_activation"):
            self.flops_other += outs[0].numel()  # the bias / accumulate add
        for o in outs[:1]:
            self.producer[o] = {len(self.matmuls) - 1}
            if is_float(o.dtype):
                self.origin[o] = dtype if not dtype.startswith(("float8", "float4")) else torch_dtype_name(o.dtype)
            if active < 1.0:
                self.active[o] = 1.0

    def _propagate_view(self, src, outs, func, args) -> None:
        if src is None:
            return
        root, origin = self.roots.get(src), self.origin.get(src)
        active, producer, const = self.active.get(src), self.producer.get(src), self.const_nz.get(src)
        new_dtype = [o for o in outs if o.dtype != src.dtype]
        for o in outs:
            if root is not None:
                self.roots[o] = root
            if origin is not None and o.dtype == src.dtype:
                self.origin[o] = origin
            elif is_float(o.dtype):
                self.origin[o] = torch_dtype_name(o.dtype)  # a view as another dtype (e.g. uint8 -> fp4x2)
            if active is not None:
                self.active[o] = active
            if producer:
                self.producer[o] = producer
            if const is not None and not new_dtype:
                self.const_nz[o] = const
