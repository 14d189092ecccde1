"""What is known about values while a reference runs on meta tensors.

Input data is unknown, but much of what decides the work is not input data: masks built from
`triu` / `arange` comparisons, constant fills, rotary tables. The tracer computes small constants
for real; this mixin follows the rest:

- the dtype each float tensor's data came from (a bf16 input upcast to fp32 still feeds a bf16
  matmul), so matmuls are charged at the rate of their operands' declared dtype;
- the nonzero fraction of big constants built by the usual mask idioms (`ones/full -> triu/tril ->
  bool / ~ / == 0`), followed symbolically since they are too big to compute;
- the fraction of a matmul result a mask leaves active (`masked_fill` / `where` with 0 or a very
  negative fill, additive and multiplicative masks), carried back to the producing matmul and
  forward to the next one (`P @ V`); a mask that depends on inputs makes that work unprovable.
"""

from __future__ import annotations

import numpy as np
import torch

INACTIVE_FILL = -1e4  # a fill at or below this (or 0) switches an attention score / product off
DTYPE_BITS = {"float4": 4, "float8": 8, "bfloat16": 16, "float16": 16, "float32": 32, "float64": 64}


def dtype_family(dtype_name: str) -> str:
    if dtype_name.startswith("float8"):
        return "float8"
    if dtype_name.startswith("float4"):
        return "float4"
    return dtype_name


def torch_dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or "float8" in str(dtype) or "float4" in str(dtype)


def band_fraction(rows: int, cols: int, diagonal: int, lower: bool) -> float:
    """Fraction of a rows x cols matrix kept by tril(diagonal) (lower) or triu(diagonal)."""
    if rows == 0 or cols == 0:
        return 0.0
    i = np.arange(rows, dtype=np.int64)
    if lower:
        kept = np.clip(i + diagonal + 1, 0, cols).sum()
    else:
        kept = (cols - np.clip(i + diagonal, 0, cols)).sum()
    return float(kept) / (rows * cols)


class ValueTracking:
    """Mixin of the tracer: value knowledge. Uses the tracer's `is_real`, `const_nz`, `real_nz`,
    `active`, `producer`, `origin`, `roots`, `unknown_mask`, `matmuls` and `notes`."""

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

    def mask_keep(self, name, args, kwargs) -> float | None:
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
                if isinstance(mask, torch.Tensor) and self.is_real(mask) and mask.numel() > 1 and is_float(mask.dtype):
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
        float_args = [t for t in tensor_args if is_float(t.dtype)]
        origins = [o for o in (self.origin_of(t) for t in float_args) if o]
        out_name = torch_dtype_name(out.dtype) if is_float(out.dtype) else None
        if out_name is not None:
            candidates = origins + [out_name]
            narrow = min(candidates, key=lambda o: DTYPE_BITS.get(dtype_family(o), 32))
            for o in outs:
                if is_float(o.dtype):
                    self.origin[o] = narrow
        # masks: what fraction stays active, and which matmul produced the masked scores
        same = [t for t in tensor_args if t.device.type == "meta" and t.numel() == out.numel()]
        active = min([self.active.get(t, 1.0) for t in same] or [1.0])
        producer = set().union(*[self.producer.get(t, set()) for t in same]) if same else set()
        keep = self.mask_keep(name, args, kwargs)
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
            frac = band_fraction(src.shape[-2], src.shape[-1], diagonal, lower=(name == "tril"))
            self.const_nz[out] = (info[0] * frac, info[1])
        elif name in ("_to_copy", "clone", "contiguous", "expand", "repeat"):
            value = None if info[1] is None else (float(bool(info[1])) if out.dtype == torch.bool else info[1])
            self.const_nz[out] = (info[0], value)
        elif name in ("bitwise_not", "logical_not") or (name == "eq" and self._scalar_value(args[1]) == 0):
            self.const_nz[out] = (1.0 - info[0], 1.0)
        elif name == "ne" and self._scalar_value(args[1]) == 0:
            self.const_nz[out] = (info[0], 1.0)
