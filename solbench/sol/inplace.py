"""Which elements an op writes into its destination, for outputs that are inputs updated in place.

A reference that updates an input in place and returns it (a KV-cache update that writes a few rows
of a big cache) only has to move the rows it writes: the rest of the buffer is already there. The
capture records, per input, the elements written into it:

- plain in-place ops and `out=` arguments write their whole destination view (a slice of the input
  when the reference wrote `cache[:, :, a:b] = x`);
- indexed writes (`index_put_`, `index_copy_`, `index_add_`, `index_fill_`, `scatter_`, ...) write the
  positions indexed: the distinct ones when the indices are known (real values, e.g. from a custom
  input entrypoint), otherwise the number of index entries (an upper estimate: duplicates write once);
- masked writes (`masked_fill_`, `masked_scatter_`) write the mask's nonzero fraction when it is
  known, otherwise the whole view.

Destinations are read only where the op needs their old values: not at all for overwrites
(`copy_`, `index_put_`, `scatter_`), at the written positions for indexed accumulation
(`index_add_`, `scatter_add_`, `index_put_(accumulate=True)`), wholly for pointwise in-place
arithmetic (`add_`).
"""

from __future__ import annotations

import math

import torch

# Ops whose destination's old values are not needed where they write.
OVERWRITE_OPS = frozenset({
    "copy", "copy_", "fill", "fill_", "zero", "zero_", "index_put", "_index_put_impl", "index_copy", "index_fill",
    "scatter", "masked_scatter", "slice_scatter", "select_scatter", "normal", "uniform", "random", "bernoulli",
    "exponential", "cauchy", "log_normal", "geometric",
})
# Indexed ops: the positions written are given by index tensors.
INDEXED_WRITE_OPS = frozenset({"index_put", "_index_put_impl", "index_copy", "index_add", "index_fill",
                               "index_reduce", "scatter", "scatter_add", "scatter_reduce"})
MASKED_WRITE_OPS = frozenset({"masked_fill", "masked_scatter"})
DISTINCT_LIMIT = 1 << 22  # index tensors up to this many entries are deduplicated when their values are known


def written_arguments(func, args, kwargs) -> list[tuple[int, torch.Tensor, bool]]:
    """(argument position, tensor, is an `out=` argument) for every tensor the op writes into."""
    found = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
        if isinstance(value, torch.Tensor):
            found.append((i, value, bool(arg.is_out)))
    return found


def reads_destination(name: str, args, kwargs) -> str:
    """How an in-place op reads its destination (argument 0): "none", "written" or "all"."""
    accumulate = (name in ("index_put", "_index_put_impl") and _arg(args, kwargs, 3, "accumulate", False)) or (
        name == "scatter" and _arg(args, kwargs, 4, "reduce", None) is not None)
    if accumulate or name in ("index_add", "index_reduce", "scatter_add", "scatter_reduce"):
        return "written"
    if name in OVERWRITE_OPS:
        return "none"
    return "all"


def _arg(args, kwargs, index: int, key: str, default):
    if key in kwargs:
        return kwargs[key]
    return args[index] if len(args) > index else default


def view_elements(t: torch.Tensor) -> int:
    """Distinct elements a view addresses (broadcast dimensions count once)."""
    return math.prod(s for s, st in zip(t.shape, t.stride()) if st != 0) if t.dim() else 1


def indexed_elements(name: str, args, kwargs, is_real) -> int:
    """Elements of the destination (argument 0) an indexed write touches, capped at its size."""
    target = args[0]
    if name in ("index_put", "_index_put_impl"):
        count = _index_put_elements(target, list(args[1]), is_real)
    else:
        dim = int(args[1]) % max(target.dim(), 1)
        index = args[2]
        if name.startswith("scatter"):
            count = _scatter_elements(target, dim, index, is_real)
        else:  # index_copy / index_add / index_fill / index_reduce: whole slices along dim
            rows = index.numel()
            if is_real(index) and 0 < index.numel() <= DISTINCT_LIMIT and target.dim():
                rows = int(torch.unique(index.reshape(-1) % target.shape[dim]).numel())
            per_row = target.numel() // target.shape[dim] if target.dim() and target.shape[dim] else 1
            count = rows * per_row
    return min(int(count), view_elements(target))


def _index_put_elements(target: torch.Tensor, indices: list, is_real) -> int:
    """Positions of target[indices] (advanced indexing), distinct when every index is known."""
    dims, tensors, known = [], [], True
    position = 0
    for i in indices:
        if i is None:
            position += 1
            continue
        if i.dtype in (torch.bool, torch.uint8):  # a mask over i.dim() dimensions
            if is_real(i):
                parts = list(i.nonzero().unbind(1))
            else:
                parts = [torch.empty(i.numel(), dtype=torch.int64, device="meta")] * i.dim()
                known = False
            for k, p in enumerate(parts):
                dims.append(position + k)
                tensors.append(p)
            position += i.dim()
            continue
        dims.append(position)
        tensors.append(i)
        known = known and is_real(i)
        position += 1
    if not tensors:
        return target.numel()
    shapes = [tuple(t.shape) for t in tensors]
    positions = math.prod(torch.broadcast_shapes(*shapes))
    rest = math.prod(s for d, s in enumerate(target.shape) if d not in dims)
    if known and 0 < positions <= DISTINCT_LIMIT:
        expanded = torch.broadcast_tensors(*[t.cpu() for t in tensors])
        stacked = torch.stack([e.reshape(-1) % target.shape[d] for e, d in zip(expanded, dims)], dim=1)
        positions = int(torch.unique(stacked, dim=0).shape[0])
    return positions * rest


def _scatter_elements(target: torch.Tensor, dim: int, index: torch.Tensor, is_real) -> int:
    """Positions scatter writes: one per index entry, distinct ones when the index is known."""
    n = index.numel()
    if not is_real(index) or not 0 < n <= DISTINCT_LIMIT or index.dim() != target.dim():
        return n
    grids = torch.meshgrid(*[torch.arange(s) for s in index.shape], indexing="ij")
    coords = [g.reshape(-1) for g in grids]
    coords[dim] = index.reshape(-1).cpu() % target.shape[dim]
    linear = torch.zeros(n, dtype=torch.int64)
    for c, size in zip(coords, target.shape):
        linear = linear * size + c
    return int(torch.unique(linear).numel())
