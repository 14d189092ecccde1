"""Run a reference on meta tensors and record the work it does, op by op.

Inputs are meta tensors of the declared shapes and dtypes (fp8 and packed fp4 included: meta
kernels accept them), so no GPU and no real data is needed. Tensors that do not depend on any input
(masks from `triu`, `arange` comparisons, rotary tables) are computed for real on the CPU when small,
so their values are known: that is how a causal or sliding-window mask is measured rather than
guessed. Values that depend on inputs are unknown; when the reference asks for one (`.item()`,
`nonzero`) a value is invented and the capture is marked approximate.

What is recorded (convention-free; `analyser` turns it into costs):
- each matmul-class op: FLOPs, operand dtype (the narrowest declared dtype the data came from) and
  the fraction of it a mask leaves active;
- other FLOPs (opcost's convention), and the names of ops not understood;
- for each input, the elements actually read (slices read their region, gathers the rows gathered,
  broadcasts their distinct elements);
- for each output, its declared size and whether it is an input returned (possibly modified in place).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from solbench.sol import inplace, opcost
from solbench.spec import dtypes

aten = torch.ops.aten

REAL_NUMEL_LIMIT = 1 << 24  # constants up to this many elements are computed for real on the CPU
REAL_MATMUL_FLOPS_LIMIT = 1e8
REAL_FLOAT_INPUT_BYTES = 1 << 24  # float inputs from a custom entrypoint kept real (masks) up to this storage
CUSTOM_INPUT_SEED = 0  # the CPU generator's seed while a custom-input entrypoint runs
MAX_OPS = 20_000
MAX_SECONDS = 5.0  # per trace (reference, or custom-input entrypoint)
INACTIVE_FILL = -1e4
# Not marked as views in aten, but they only reshape or re-label the same data.
VIEW_LIKE = frozenset({"detach", "alias", "lift_fresh", "_reshape_alias", "_unsafe_view", "squeeze", "unsqueeze",
                       "transpose", "t", "as_strided", "view_as_real", "view_as_complex", "resolve_conj", "resolve_neg"})
# Random float data only matters as data: big draws stay meta (random ints, e.g. routing, stay real).
RANDOM_FLOAT = frozenset({"randn", "rand", "normal", "uniform", "randn_like", "rand_like", "bernoulli",
                          "exponential", "cauchy", "log_normal"})
RANDOM_REAL_LIMIT = 1 << 16
UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})  # a fill at or below this (or 0) switches an attention score / product off

_WIDTH = {"float4": 4, "float8": 8, "bfloat16": 16, "float16": 16, "float32": 32, "float64": 64}

FACTORY_FUNCS = frozenset({
    torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.linspace, torch.logspace, torch.eye,
    torch.rand, torch.randn, torch.randint, torch.randperm, torch.tensor, torch.as_tensor, torch.empty_strided,
    torch.tril_indices, torch.triu_indices, torch.scalar_tensor, torch.normal,
})


class CaptureError(RuntimeError):
    """The reference could not be traced (the analyser falls back and says why)."""


class BudgetExceeded(CaptureError):
    pass


def _family(dtype_name: str) -> str:
    if dtype_name.startswith("float8"):
        return "float8"
    if dtype_name.startswith("float4"):
        return "float4"
    return dtype_name


def _torch_dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or "float8" in str(dtype) or "float4" in str(dtype)


@dataclass
class MatmulEvent:
    op: str
    flops: float
    dtype: str  # definition dtype name of the operands (narrowest origin)
    active: float = 1.0  # fraction of the work left once masks are applied
    flops_solar: float | None = None  # the published convention's count, where it differs
    provable: bool = True  # both operands come from inputs and no input-dependent mask touched it


@dataclass
class InputUse:
    name: str
    dtype: str
    numel: int  # stored elements (packed fp4: bytes)
    regions: dict = field(default_factory=dict)  # (offset, shape, stride) -> distinct elements
    gathered: int = 0
    written_regions: dict = field(default_factory=dict)  # written in place: (offset, shape, stride) -> elements
    scattered: int = 0  # written in place by indexed / masked ops

    @property
    def elements_read(self) -> int:
        return min(self.numel, sum(self.regions.values()) + self.gathered)

    @property
    def elements_written(self) -> int:
        return min(self.numel, sum(self.written_regions.values()) + self.scattered)


@dataclass
class OutputInfo:
    name: str
    dtype: str
    numel: int
    aliases_input: str | None = None  # the reference returned (a view of) this input
    written: int | None = None  # for an input handed back: the elements the reference wrote into it

    @property
    def elements_moved(self) -> int:
        """Elements a kernel must write: all of a fresh output, the updated part of an input handed back."""
        return self.numel if self.aliases_input is None else min(self.numel, self.written or 0)


@dataclass
class Capture:
    method: str  # "meta" (exact), "meta-approx" (invented values), "declared-io" (not traced)
    matmuls: list[MatmulEvent]
    flops_other: float
    inputs: dict[str, InputUse]
    outputs: dict[str, OutputInfo]
    unknown_ops: dict[str, int]
    fabricated: list[str]
    notes: list[str]
    n_ops: int

    @property
    def exact(self) -> bool:
        return self.method == "meta"


def _band_fraction(rows: int, cols: int, diagonal: int, lower: bool) -> float:
    """Fraction of a rows x cols matrix kept by tril(diagonal) (lower) or triu(diagonal)."""
    if rows == 0 or cols == 0:
        return 0.0
    i = np.arange(rows, dtype=np.int64)
    if lower:
        kept = np.clip(i + diagonal + 1, 0, cols).sum()
    else:
        kept = (cols - np.clip(i + diagonal, 0, cols)).sum()
    return float(kept) / (rows * cols)


class _Tracer(TorchDispatchMode):
    """Executes every aten op on meta (or for real, for small constants) and records its cost."""

    def __init__(self, max_ops: int = MAX_OPS, max_seconds: float = MAX_SECONDS):
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
        self.inputs: dict[str, InputUse] = {}
        self.matmuls: list[MatmulEvent] = []
        self.flops_other = 0.0
        self.unknown: Counter = Counter()
        self.fabricated: list[str] = []
        self.notes: list[str] = []
        self.n_ops = 0
        self.max_ops = max_ops
        self.deadline = time.monotonic() + max_seconds
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

    def nonzero_fraction(self, t) -> tuple[float, float | None] | None:
        """(fraction of nonzero elements, their common value or None) when known."""
        if isinstance(t, (int, float, bool)):
            return (1.0 if t else 0.0, float(t))
        if not isinstance(t, torch.Tensor):
            return None
        if self.is_real(t):
            cached = self.real_nz.get(t)
            if cached is None:
                frac = float(torch.count_nonzero(t)) / t.numel() if t.numel() else 0.0
                cached = self.real_nz[t] = (frac, None)
            return cached
        return self.const_nz.get(t)

    def _fabricate_scalar(self, t: torch.Tensor):
        self.fabricated.append(f".item() of an input-dependent {_torch_dtype_name(t.dtype)} tensor {tuple(t.shape)}")
        if t.dtype == torch.bool:
            return False
        if _is_float(t.dtype):
            return 1.0
        return 1

    # -- dispatch ----------------------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten._local_scalar_dense.default:
            t = args[0]
            return func(t) if self.is_real(t) else self._fabricate_scalar(t)
        self.n_ops += 1
        if self.n_ops > self.max_ops or (self.n_ops % 256 == 0 and time.monotonic() > self.deadline):
            raise BudgetExceeded(f"the reference runs more than {self.max_ops} ops or {MAX_SECONDS:.0f} s "
                                 f"on meta tensors (a Python loop over data?)")
        name = opcost.packet_name(func)
        tensors = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        all_real = all(self.is_real(t) for t in tensors)
        if name in ("nonzero", "argwhere") and not all_real:
            t = args[0]
            self.fabricated.append(f"{name} of an input-dependent tensor {tuple(t.shape)}: assumed all nonzero")
            out = torch.empty((t.numel(), t.dim()), dtype=torch.int64, device="meta")
            return out
        if name == "_unique2" and not all_real:
            t = args[0]
            self.fabricated.append(f"unique of an input-dependent tensor {tuple(t.shape)}: assumed all distinct")
            n = t.numel()
            return (torch.empty((n,), dtype=t.dtype, device="meta"),
                    torch.empty(tuple(t.shape), dtype=torch.int64, device="meta"),
                    torch.empty((n,), dtype=torch.int64, device="meta"))
        if name in ("index", "index_put", "_index_put_impl") and not all_real:
            args = self._bool_indices_as_long(name, args)
        if tensors and all_real and name not in opcost.MATMUL_OPS and all(
                t.numel() <= REAL_NUMEL_LIMIT for t in tensors):
            out = func(*args, **kwargs)  # small constants: real values (data-dependent ops work)
            if self.recording:
                self._record(func, name, args, kwargs,
                             [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)])
            return out
        m_args, m_kwargs = pytree.tree_map(self._to_meta, (args, kwargs))
        if "device" in m_kwargs:
            m_kwargs["device"] = torch.device("meta")
        try:
            out = func(*m_args, **m_kwargs)
        except Exception as exc:
            raise CaptureError(f"{func} failed on meta tensors: {type(exc).__name__}: {str(exc)[:200]}") from exc
        outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
        if all_real and name not in UNINITIALISED and self._small(name, m_args, outs) and not (
                name in RANDOM_FLOAT and any(o.numel() > RANDOM_REAL_LIMIT for o in outs)):
            r_kwargs = dict(kwargs)
            if "device" in r_kwargs:
                r_kwargs["device"] = torch.device("cpu")
            out = func(*args, **r_kwargs)
            outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
        elif not all_real and func._schema.arguments and func._schema.arguments[0].is_write:
            first = args[0] if args else None
            if isinstance(first, torch.Tensor) and first.device.type != "meta":
                self.tainted[first] = True  # a real tensor got input-dependent values
        if self.recording:
            self._record(func, name, args, kwargs, outs)
        return out

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
        if _is_float(t.dtype):
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
        tensor_args = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
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

    def _origin_of(self, t: torch.Tensor) -> str | None:
        o = self.origin.get(t)
        if o is not None:
            return o
        return _torch_dtype_name(t.dtype) if _is_float(t.dtype) and t.device.type == "meta" else None

    def _record_matmul(self, name, args, tensor_args, outs) -> None:
        idx = opcost.MATMUL_OPERANDS.get(name, (0, 1))
        operands = [args[i] for i in idx if i < len(args) and isinstance(args[i], torch.Tensor)]
        if name in ("_scaled_mm", "_scaled_grouped_mm", "_int_mm"):
            dtype = _torch_dtype_name(operands[0].dtype)
        else:
            origins = [o for o in (self._origin_of(t) for t in operands) if o]
            dtype = max(origins, key=lambda o: _WIDTH.get(_family(o), 32)) if origins else \
                _torch_dtype_name(operands[0].dtype)
        flops = opcost.MATMUL_OPS[name](args, outs[0])
        active = min([self.active.get(t, 1.0) for t in operands] or [1.0])
        provable = all(t in self.derived and t not in self.unknown_mask for t in operands)
        self.matmuls.append(MatmulEvent(name, float(flops), dtype, active, opcost.solar_matmul_flops(name, args),
                                        provable))
        if name in ("addmm", "baddbmm", "addbmm", "addmv", "_addmm_activation"):
            self.flops_other += outs[0].numel()  # the bias / accumulate add
        for o in outs[:1]:
            self.producer[o] = {len(self.matmuls) - 1}
            if _is_float(o.dtype):
                self.origin[o] = dtype if not dtype.startswith(("float8", "float4")) else _torch_dtype_name(o.dtype)
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
            elif _is_float(o.dtype):
                self.origin[o] = _torch_dtype_name(o.dtype)  # a view as another dtype (e.g. uint8 -> fp4x2)
            if active is not None:
                self.active[o] = active
            if producer:
                self.producer[o] = producer
            if const is not None and not new_dtype:
                self.const_nz[o] = const

    def _mask_keep(self, name, args, kwargs) -> float | None:
        """Fraction of `self` left active by a masking op, when the mask's values are known."""
        if name == "masked_fill" and len(args) >= 3:
            value = args[2]
            value = float(value) if not isinstance(value, torch.Tensor) else (
                float(value) if self.is_real(value) and value.numel() == 1 else None)
            if value is not None and (value == 0 or value <= INACTIVE_FILL):
                nz = self.nonzero_fraction(args[1])
                return None if nz is None else 1.0 - nz[0]
        if name == "where" and len(args) >= 3:
            cond, a, b = args[0], args[1], args[2]
            for other, keep_if_true in ((b, True), (a, False)):
                fill = self._scalar_value(other)
                if fill is not None and (fill == 0 or fill <= INACTIVE_FILL):
                    nz = self.nonzero_fraction(cond)
                    if nz is not None:
                        return nz[0] if keep_if_true else 1.0 - nz[0]
        if name in ("add", "sub") and len(args) >= 2:
            for mask in args[:2]:
                if isinstance(mask, torch.Tensor) and self.is_real(mask) and mask.numel() > 1 and _is_float(mask.dtype):
                    if bool((mask <= INACTIVE_FILL).any()):
                        return float((mask > INACTIVE_FILL).float().mean())
                info = self.const_nz.get(mask) if isinstance(mask, torch.Tensor) else None
                if info is not None and info[1] is not None and info[1] <= INACTIVE_FILL:
                    return 1.0 - info[0]
        if name == "mul" and len(args) >= 2:
            for mask in args[:2]:
                if isinstance(mask, torch.Tensor) and mask.numel() > 1 and (
                        self.is_real(mask) or mask in self.const_nz):
                    nz = self.nonzero_fraction(mask)
                    if nz is not None and nz[0] < 1.0:
                        return nz[0]
        return None

    def _scalar_value(self, x) -> float | None:
        if isinstance(x, (int, float, bool)):
            return float(x)
        if isinstance(x, torch.Tensor) and self.is_real(x) and x.numel() == 1:
            return float(x)
        return None

    def _propagate_values(self, name, args, kwargs, tensor_args, outs) -> None:
        if not outs:
            return
        out = outs[0]
        # dtype origin: casts narrow it; other ops take the narrowest float input
        float_args = [t for t in tensor_args if _is_float(t.dtype)]
        origins = [o for o in (self._origin_of(t) for t in float_args) if o]
        out_name = _torch_dtype_name(out.dtype) if _is_float(out.dtype) else None
        if out_name is not None:
            candidates = origins + [out_name]
            narrow = min(candidates, key=lambda o: _WIDTH.get(_family(o), 32))
            for o in outs:
                if _is_float(o.dtype):
                    self.origin[o] = narrow
        # masks: what fraction stays active, and which matmul produced the masked scores
        same = [t for t in tensor_args if t.device.type == "meta" and t.numel() == out.numel()]
        active = min([self.active.get(t, 1.0) for t in same] or [1.0])
        producer = set().union(*[self.producer.get(t, set()) for t in same]) if same else set()
        keep = self._mask_keep(name, args, kwargs)
        if keep is None and name in ("masked_fill", "where") and out.device.type == "meta":
            # a mask we cannot evaluate: a kernel may legitimately skip what it switches off
            for i in producer:
                self.matmuls[i].provable = False
            for o in outs:
                self.unknown_mask[o] = True
            if producer:
                self.notes.append("a mask whose values depend on the inputs is applied to matmul results: "
                                  "that work is counted as dense")
        if keep is not None and out.device.type == "meta":
            active = min(active, keep * active)
            for i in producer:
                self.matmuls[i].active = min(self.matmuls[i].active, active)
        if out.device.type == "meta":
            if active < 1.0:
                self.active[out] = active
            if producer:
                self.producer[out] = producer
        self._track_constants(name, args, tensor_args, out)

    def _track_constants(self, name, args, tensor_args, out) -> None:
        """Nonzero fractions of big constants (too large to compute) built by the usual mask idioms."""
        if out.device.type != "meta":
            return
        if name in ("ones", "full", "ones_like", "full_like", "new_ones", "new_full") and not any(
                isinstance(t, torch.Tensor) and t in self.roots for t in tensor_args):
            value = 1.0 if "ones" in name else self._scalar_value(args[-1] if name in ("full", "new_full")
                                                                   else args[1])
            if value is not None:
                self.const_nz[out] = (1.0 if value != 0 else 0.0, value)
            return
        src = args[0] if args and isinstance(args[0], torch.Tensor) else None
        info = self.const_nz.get(src) if src is not None else None
        if info is None:
            return
        if name in ("triu", "tril") and src.dim() >= 2:
            diagonal = int(args[1]) if len(args) > 1 else 0
            frac = _band_fraction(src.shape[-2], src.shape[-1], diagonal, lower=(name == "tril"))
            self.const_nz[out] = (info[0] * frac, info[1])
        elif name in ("_to_copy", "clone", "contiguous", "expand", "repeat"):
            value = None if info[1] is None else (float(bool(info[1])) if out.dtype == torch.bool else info[1])
            self.const_nz[out] = (info[0], value)
        elif name in ("bitwise_not", "logical_not") or (name == "eq" and self._scalar_value(args[1]) == 0):
            self.const_nz[out] = (1.0 - info[0], 1.0)
        elif name == "ne" and self._scalar_value(args[1]) == 0:
            self.const_nz[out] = (info[0], 1.0)


class _Redirect(TorchFunctionMode):
    """Keeps everything on meta: factories and `.to(device)` never reach a real device; SDPA is
    costed as one op (its decomposition on meta would hide causal masking)."""

    def __init__(self, tracer: _Tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.Tensor.cuda, torch.Tensor.cpu):
            return args[0]
        if func is torch.Tensor.to:
            args, kwargs = _strip_device(args, kwargs)
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
        return func(*args, **kwargs)

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
            active = _band_fraction(lq, lk, 0, lower=True)
        if isinstance(mask, torch.Tensor):
            if mask.dtype == torch.bool:
                nz = tracer.nonzero_fraction(mask)
                active = active * nz[0] if nz is not None else active
                if nz is None:
                    tracer.notes.append("SDPA mask depends on inputs: counted as dense")
            else:
                keep = tracer._mask_keep("add", (q, mask), {})
                active = active * keep if keep is not None else active
            tracer.note_access(mask)
        for t in (q, k, v):
            tracer.note_access(t)
        if tracer.recording and not tracer.suppress:
            origins = [o for o in (tracer._origin_of(t) for t in (q, k, v)) if o]
            dtype = max(origins, key=lambda o: _WIDTH.get(_family(o), 32)) if origins else _torch_dtype_name(q.dtype)
            provable = mask is None or (not isinstance(mask, torch.Tensor)) or mask not in tracer.derived
            tracer.matmuls.append(MatmulEvent("scaled_dot_product_attention", flops, dtype, active, None,
                                              provable and all(t in tracer.derived for t in (q, k, v))))
            tracer.flops_other += 4.0 * batch * lq * lk * active
        with tracer.suppressed():
            out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor) and _is_float(out.dtype):
            origins = [o for o in (tracer._origin_of(t) for t in (q, k, v)) if o]
            if origins:
                tracer.origin[out] = max(origins, key=lambda o: _WIDTH.get(_family(o), 32))
        return out


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


def _meta_input(shape: tuple[int, ...], dtype_name: str) -> torch.Tensor:
    return torch.empty(shape, dtype=dtypes.torch_dtype(dtype_name), device="meta")


def compile_reference(source: str, name: str) -> dict:
    """Execute the reference module source; returns its namespace."""
    namespace: dict = {"__name__": f"solbench_reference_{abs(hash(name))}"}
    code = compile(source, f"<reference {name}>", "exec")
    exec(code, namespace)  # noqa: S102 - the reference is trusted problem code, run only on meta tensors
    return namespace


def run_capture(definition, axis_values: dict[str, int], scalars: dict[str, float | int | bool],
                namespace: dict | None = None, *, max_ops: int = MAX_OPS) -> Capture:
    """Trace `definition.reference` on meta inputs for one workload's axes; raises CaptureError."""
    namespace = namespace if namespace is not None else compile_reference(definition.reference, definition.name)
    run = namespace["run"]
    tracer = _Tracer(max_ops=max_ops)
    redirect = _Redirect(tracer)
    args = []
    shapes = definition.input_shapes(axis_values)
    custom = _custom_values(definition, axis_values, scalars, namespace, tracer)
    for name, spec in definition.inputs.items():
        shape = shapes[name]
        given = custom.get(name)
        if shape is None:
            if isinstance(given, torch.Tensor) and given.device.type != "meta" and given.numel() == 1:
                given = given.item()
            if not isinstance(given, (int, float, bool)):
                given = scalars.get(name, _default_scalar(spec.dtype))
            args.append(given)
            continue
        if (isinstance(given, torch.Tensor) and given.device.type != "meta" and tuple(given.shape) == tuple(shape)
                and given.dtype == dtypes.torch_dtype(spec.dtype)
                and (not _is_float(given.dtype) or given.untyped_storage().nbytes() <= REAL_FLOAT_INPUT_BYTES)):
            t = given  # real values from the custom entrypoint: routing, offsets and masks become exact
        else:
            t = _meta_input(shape, spec.dtype)  # outside the modes: float inputs are never real
        tracer.add_input(name, t, spec.dtype)
        args.append(t)
    try:
        with redirect, tracer, torch.no_grad():
            result = run(*args)
    except CaptureError:
        raise
    except Exception as exc:
        raise CaptureError(f"{type(exc).__name__}: {str(exc)[:300]}") from exc
    outputs = _match_outputs(definition, axis_values, result, tracer)
    method = "meta-approx" if tracer.fabricated else "meta"
    return Capture(method, tracer.matmuls, tracer.flops_other, tracer.inputs, outputs, dict(tracer.unknown),
                   sorted(set(tracer.fabricated)), tracer.notes, tracer.n_ops)


def _custom_values(definition, axis_values, scalars, namespace, tracer: _Tracer) -> dict:
    """What the custom-input entrypoint makes, run like the reference (big tensors stay meta).

    Its scalars, integer tensors (indices, routing, sequence offsets) and small float tensors (masks)
    are used, so data-dependent references see real, valid values; big float tensors stay meta.
    """
    entry = definition.custom_inputs_entrypoint
    if not entry or entry not in namespace:
        return {}
    helper = _Tracer(max_ops=MAX_OPS)
    helper.recording = False
    try:
        with torch.random.fork_rng(devices=[]), _Redirect(helper), helper, torch.no_grad():
            torch.manual_seed(CUSTOM_INPUT_SEED)  # the same routing every time: bounds are reproducible
            values = namespace[entry]({**axis_values, **scalars}, torch.device("cpu"))
    except Exception as exc:
        tracer.notes.append(f"custom-input entrypoint {entry} not usable on meta ({type(exc).__name__}); "
                            f"inputs from declared shapes")
        return {}
    if not isinstance(values, dict):
        return {}
    if helper.fabricated:
        tracer.notes.append(f"custom-input entrypoint {entry}: {len(helper.fabricated)} values invented")
    kept = {k: v for k, v in values.items()
            if not (isinstance(v, torch.Tensor) and (v.device.type == "meta" or v in helper.tainted))}
    # Ops such as SDPA refuse a mix of meta and real float operands: when some float input had to
    # stay meta, all float inputs do (integer and bool tensors keep their real values).
    if any(isinstance(v, torch.Tensor) and v.is_floating_point() and k not in kept for k, v in values.items()):
        kept = {k: v for k, v in kept.items() if not (isinstance(v, torch.Tensor) and v.is_floating_point())}
    return kept


def _default_scalar(dtype_name: str):
    if dtype_name == "bool":
        return False
    return 1.0 if dtypes.is_floating(dtype_name) else 1


def _match_outputs(definition, axis_values, result, tracer: _Tracer) -> dict[str, OutputInfo]:
    shapes = definition.output_shapes(axis_values)
    if isinstance(result, dict):
        values = [result.get(n) for n in definition.outputs]
    elif isinstance(result, (tuple, list)):
        values = list(result)
    else:
        values = [result]
    if len(values) != len(definition.outputs):
        tracer.notes.append(f"reference returned {len(values)} values for {len(definition.outputs)} "
                            f"declared outputs; sizes taken from the declaration")
    outputs = {}
    for i, (name, spec) in enumerate(definition.outputs.items()):
        shape = shapes[name]
        numel = 0 if shape is None else math.prod(shape)
        value = values[i] if i < len(values) else None
        alias = tracer.roots.get(value) if isinstance(value, torch.Tensor) else None
        written = tracer.inputs[alias].elements_written if alias is not None else None
        outputs[name] = OutputInfo(name, spec.dtype, numel, alias, written)
    return outputs


def declared_io_capture(definition, axis_values: dict[str, int], reason: str) -> Capture:
    """The fallback when tracing fails: every declared input read, every output written, FLOPs unknown."""
    inputs = {}
    for name, shape in definition.input_shapes(axis_values).items():
        if shape is None:
            continue
        numel = math.prod(shape)
        use = InputUse(name, definition.inputs[name].dtype, numel)
        use.regions[("all",)] = numel
        inputs[name] = use
    outputs = {name: OutputInfo(name, definition.outputs[name].dtype, 0 if s is None else math.prod(s))
               for name, s in definition.output_shapes(axis_values).items()}
    return Capture("declared-io", [], 0.0, inputs, outputs, {"<untraced reference>": 1}, [],
                   [f"not traced ({reason}); bytes are every declared input and output, FLOPs unknown"], 0)
