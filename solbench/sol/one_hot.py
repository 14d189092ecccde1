"""Expert loops over a one-hot routing mask: the balanced-routing rule, both directions.

Many MoE references dispatch through a one-hot mask of the chosen experts:

    expert_mask = F.one_hot(topk_ids, num_classes=E).permute(2, 1, 0)   # [E, k, N]
    for e in range(E):
        if expert_mask[e].sum() > 0:                                    # a guard on data
            slot, token = torch.where(expert_mask[e])                   # the rows routed to e
    hit = (expert_mask.sum(dim=(-1, -2)) > 0).nonzero()                 # or: the experts hit

On meta tensors the mask's values are unknown: `where` would return every position (each expert
processing every token, E times the routed work) and the guard's `.item()` would be invented as
False (no expert running at all). Both are wrong by the number of experts.

`one_hot` decomposes into `ids.unsqueeze(-1) == arange(E)`, which the tracer sees; the result holds
exactly `ids.numel()` ones (every id is in [0, E), or one_hot fails), one per id along its class
dimension. The rule: those ones are spread evenly over the E classes, class `e` receiving
`ones // E` of them plus one for the first `ones % E` classes. So the routed work totals exactly
the `N x k` (token, slot) pairs, and an expert is touched iff it receives a row: all E for a
prefill batch, the first N x k for a small decode step. The class-dim bookkeeping follows
copies, permutes, transposes and unsqueezes; selecting class `e` gives a mask with that many ones
(`nonzero` / `where` return that many positions); summing it, or summing the whole mask per
class, gives those counts as known values, so guards on them are decided by the rule, never
invented. The capture is marked approximate and the notes say so.
"""

from __future__ import annotations

import torch

SAME = frozenset({"_to_copy", "clone", "contiguous", "alias", "detach", "lift_fresh", "view", "_unsafe_view",
                  "reshape", "_reshape_alias"})


def share(ones: int, classes: int, index: int, counts: tuple | None = None) -> int:
    """Ones class `index` receives: its known count, else an even share of `ones` over `classes`."""
    if counts is not None:
        return counts[index]
    return ones // classes + (1 if index < ones % classes else 0)


def _norm(dim: int, ndim: int) -> int:
    return dim + ndim if dim < 0 else dim


class OneHotRouting:
    """Mixin of the tracer. Uses its `one_hot` (tensor -> (class dim, classes, ones, counts per class
    when the ids are known)), `selected` (mask -> ones it holds), `counted` (masks whose count is
    known, not assumed), `zero_filled` (tensors made by `zeros`) and `fabricated`.

    Known ids (real values from a custom-input entrypoint) make a one-hot mask too big to compute
    for real (it has E times the ids' elements) still exact: their per-class counts are kept."""

    def track_one_hot(self, name: str, args, kwargs, outs: list) -> None:
        if name in ("zeros", "zeros_like", "new_zeros") and outs:
            self.zero_filled[outs[0]] = True
            return
        if not outs or not args or not isinstance(args[0], torch.Tensor):
            return
        src, out = args[0], outs[0]
        if name == "eq" and len(args) > 1 and isinstance(args[1], torch.Tensor):
            ids = src if src.dim() and src.shape[-1] == 1 else None
            if ids is not None and tuple(out.shape) == (*ids.shape[:-1], args[1].numel()):
                self._detect(ids, args[1].numel(), out, table=args[1])
            return
        if name == "scatter" and len(args) > 3 and isinstance(args[2], torch.Tensor) \
                and not isinstance(args[3], torch.Tensor) and args[3] == 1:  # scatter.src (a backward) is no one_hot
            # one_hot's other decomposition: zeros([..., E]).scatter_(-1, ids.unsqueeze(-1), 1)
            if src in self.zero_filled and _norm(args[1], src.dim()) == src.dim() - 1 \
                    and tuple(args[2].shape) == (*src.shape[:-1], 1):
                self._detect(args[2], src.shape[-1], out)
            return
        if src in self.selected and (name in SAME or name in ("squeeze", "unsqueeze", "permute", "transpose")):
            self.selected[out] = self.selected[src]
            if src in self.counted:
                self.counted[out] = True
            return
        info = self.one_hot.get(src)
        if info is None:
            return
        dim, classes, ones, counts = info
        ndim = src.dim()
        if name in SAME:
            if name not in ("view", "_unsafe_view", "reshape", "_reshape_alias") or out.shape == src.shape:
                self.one_hot[out] = info
        elif name == "permute":
            order = [_norm(d, ndim) for d in args[1]]
            self.one_hot[out] = (order.index(dim), classes, ones, counts)
        elif name == "transpose":
            a, b = _norm(args[1], ndim), _norm(args[2], ndim)
            self.one_hot[out] = ({a: b, b: a}.get(dim, dim), classes, ones, counts)
        elif name == "unsqueeze":
            at = _norm(args[1], ndim + 1)
            self.one_hot[out] = (dim + 1 if at <= dim else dim, classes, ones, counts)
        elif name == "select":
            at, index = _norm(args[1], ndim), _norm(args[2], src.shape[_norm(args[1], ndim)])
            if at == dim:
                self.selected[out] = share(ones, classes, index, counts)
                if counts is not None:
                    self.counted[out] = True  # a known count: `nonzero` of it is exact in size
            elif src.shape[at]:  # one slice of another dim: an even part of the ones (counts unknown)
                self.one_hot[out] = (dim - 1 if at < dim else dim, classes, ones // src.shape[at], None)

    def _detect(self, ids: torch.Tensor, classes: int, out: torch.Tensor, table: torch.Tensor | None = None) -> None:
        """`ids.unsqueeze(-1) == arange(E)` (or the scatter form): a one-hot mask over E classes."""
        if table is not None and (not self.is_real(table) or table.dim() != 1
                                  or not torch.equal(table.cpu(), torch.arange(classes))):
            return
        if classes < 2 or ids.is_floating_point() or ids.dtype == torch.bool:
            return
        ones = ids.numel()
        if self.is_real(ids):
            flat = ids.flatten().long()
            if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= classes):
                return
            counts = tuple(torch.bincount(flat, minlength=classes).tolist())
            self.one_hot[out] = (out.dim() - 1, classes, ones, counts)
            return
        self.one_hot[out] = (out.dim() - 1, classes, ones, None)
        self.fabricated.append(f"one_hot of input-dependent ids {tuple(ids.shape[:-1])} over {classes} classes: "
                               f"balanced routing assumed ({ones // classes}-{-(-ones // classes)} rows per class)")

    def routed_counts(self, name: str, args, kwargs) -> torch.Tensor | None:
        """Sums of routing masks as known values (per the rule), or None when not one."""
        if name != "sum" or not args or not isinstance(args[0], torch.Tensor):
            return None
        src = args[0]
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        dtype = kwargs.get("dtype") or (torch.int64 if not src.is_floating_point() else src.dtype)
        if src in self.selected and not dims and not keepdim:
            return torch.tensor(self.selected[src], dtype=dtype)
        info = self.one_hot.get(src)
        if info is None or not dims or keepdim:
            return None
        dim, classes, ones, counts = info
        reduced = {_norm(d, src.dim()) for d in ([dims] if isinstance(dims, int) else dims)}
        if reduced != set(range(src.dim())) - {dim}:
            return None
        return torch.tensor([share(ones, classes, e, counts) for e in range(classes)], dtype=dtype)
