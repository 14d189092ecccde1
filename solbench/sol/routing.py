"""Data-dependent expert loops on meta tensors: the balanced-routing assumption.

A mixture-of-experts reference often routes with values it computes from its inputs and then loops
over the experts it picked:

    topk_weights, topk_ids = torch.topk(probs, k)          # ids in [0, num_experts)
    for expert in torch.unique(topk_ids).tolist():
        token_idx, slot = torch.where(topk_ids == expert)   # the (token, slot) pairs routed there
        ...

On meta tensors neither the ids nor their counts are known. The tracer then follows a *value
bound*: an integer tensor of indices into a dimension of size B (the index output of `topk`,
`sort`, `argsort`, `argmax`, `max`/`min` along a dim, ...) holds values in [0, B), and so do its
views, copies, gathers and `unique`. With it:

- `unique` of N ids below B yields min(N, B) values: at most that many experts can be touched, and
  for a prefill batch (N >= B) that is every expert. `.tolist()` then yields ids 0 .. n-1.
- `ids == v` for a scalar v selects, *assuming balanced routing* (every id equally often),
  max(1, ceil(N / B)) elements: the N selections spread evenly over the min(N, B) ids present.
  `nonzero` / `torch.where` of that mask returns that many positions.

So the expert loop is traced with min(N, B) experts of about N / B rows each: the routed work is
counted once in total (rounded up per expert), and every touched expert's weights are read once.
Real routing is rarely balanced, but the total routed work does not depend on the balance, only the
number of experts touched does (an upper estimate here). The capture is marked approximate and
the notes say which rule was used; rejection (`reject`) never uses an approximate capture.
"""

from __future__ import annotations

import math

import torch

# Ops whose integer output indexes a dimension of their first argument.
INDEX_PRODUCERS = frozenset({"topk", "sort", "argsort", "argmax", "argmin", "max", "min", "kthvalue", "mode",
                             "cummax", "cummin", "sort_stable"})
# Ops whose integer output takes its values from their first argument's values.
VALUE_PRESERVING = frozenset({"clone", "contiguous", "_to_copy", "index", "index_select", "gather", "take",
                              "take_along_dim", "cat", "stack", "flatten", "reshape", "masked_select", "flip",
                              "roll", "repeat", "_unique2", "unique_consecutive"})


def _dim(name: str, args, kwargs):
    position = 2 if name in ("topk", "kthvalue") else 1
    if "dim" in kwargs:
        return kwargs["dim"]
    if len(args) > position and isinstance(args[position], int) and not isinstance(args[position], bool):
        return args[position]
    return None if name in ("argmax", "argmin") else -1


class BalancedRouting:
    """Mixin of the tracer: value bounds of integer index tensors and the balanced-routing counts.
    Uses the tracer's `value_bound`, `selected` and `fabricated`."""

    def track_bounds(self, name: str, func, args, kwargs, outs: list) -> None:
        """Bounds of an op's integer outputs, and the selection size of `ids == v` masks."""
        if not outs:
            return
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if name in INDEX_PRODUCERS and first is not None:
            index_outs = [o for o in outs if not o.is_floating_point() and o.dtype != torch.bool]
            dim = _dim(name, args, kwargs)
            if index_outs and (name not in ("max", "min") or len(outs) > 1):
                if dim is not None and first.dim() and not -first.dim() <= dim < first.dim():
                    return
                bound = first.numel() if dim is None else (first.shape[dim] if first.dim() else 1)
                for o in index_outs:
                    self.value_bound[o] = bound
            return
        sources = [t for t in (args[0] if name in ("cat", "stack") and args else [first]) if t is not None]
        bounds = [self.value_bound.get(t) for t in sources if isinstance(t, torch.Tensor)]
        if not bounds or any(b is None for b in bounds):
            return
        bound = max(bounds)
        scalar = len(args) > 1 and (isinstance(args[1], (int, float)) or (
            isinstance(args[1], torch.Tensor) and args[1].numel() == 1 and args[1] not in self.value_bound))
        if name == "eq" and scalar and outs[0].dtype == torch.bool:
            n = first.numel()
            self.selected[outs[0]] = max(1, math.ceil(n / bound)) if n else 0
            return
        if func.is_view or name in VALUE_PRESERVING:
            for o in outs[:1]:
                if not o.is_floating_point() and o.dtype != torch.bool:
                    self.value_bound[o] = bound

    def unique_count(self, t: torch.Tensor) -> int:
        """Distinct values assumed in an input-dependent tensor (all of them, at most its bound)."""
        bound = self.value_bound.get(t)
        n = t.numel()
        if bound is None:
            self.fabricated.append(f"unique of an input-dependent tensor {tuple(t.shape)}: assumed all distinct")
            return n
        self.fabricated.append(f"unique of input-dependent ids {tuple(t.shape)} in [0, {bound}): assumed "
                               f"{min(n, bound)} distinct (every id present that can be)")
        return min(n, bound)

    def nonzero_rows(self, name: str, t: torch.Tensor) -> int:
        """Positions `nonzero` of an input-dependent mask returns: a balanced share, else all."""
        rows = self.selected.get(t)
        if rows is None:
            self.fabricated.append(f"{name} of an input-dependent tensor {tuple(t.shape)}: assumed all nonzero")
            return t.numel()
        if t in self.counted:
            return rows  # the count is known (ids with real values): which positions does not matter
        self.fabricated.append(f"{name} of ids == v over {tuple(t.shape)}: balanced routing assumed, "
                               f"{rows} selected per id")
        return rows
