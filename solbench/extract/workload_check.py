"""Which workloads a captured block's reference can run: every emitted size is checked, on meta tensors.

Validation runs the reference on CPU at two small sizes; its workloads go up to the model's real sizes.
On the way `torch.export` may have specialised a size for what it saw: a loop over chunks unrolled for
one chunk, a branch taken because the sequence was shorter than a chunk. Its range constraints and
runtime asserts then exclude some workloads, and the emitted code (which drops those asserts) raises or,
worse, computes something else there. So each workload point is checked twice, without memory or
compute: against the export's guards (range constraints and every runtime assert, evaluated at the
point's sizes), and by running the emitted `run` on meta tensors of the definition's shapes, its outputs'
shapes compared with the declared ones. A point that fails either is not emitted, and the run says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from solbench.extract.draft import TORCH_DTYPES, Draft
from solbench.extract.generic import Axis
from solbench.extract.workloads import axis_values

# what a meta run raises where a value, not a shape, decides (a MoE's token counts per expert): the
# shapes cannot be followed there, so such a point rests on the export's guards alone
_DATA_DEPENDENT = ("data-dependent", "data dependent", "DataDependent", "DynamicOutputShape", "meta tensor",
                   "on 'meta'", "Cannot copy out of meta", "item()")
RUN_FAILS = "the reference"


@dataclass
class PointCheck:
    """The workload points a reference runs at, and the ones left out with why (one line each)."""

    kept: list[dict[str, int]] = field(default_factory=list)
    dropped: list[tuple[dict[str, int], str]] = field(default_factory=list)

    @property
    def failed_runs(self) -> bool:
        """Whether the emitted code itself failed somewhere (not only a guard of the export)."""
        return any(why.startswith(RUN_FAILS) for _, why in self.dropped)

    def summary(self) -> str:
        """One line: how many points were left out, the first reason."""
        if not self.dropped:
            return ""
        points = ", ".join(_label(p) for p, _ in self.dropped[:4]) + (" ..." if len(self.dropped) > 4 else "")
        return (f"{len(self.dropped)} of {len(self.kept) + len(self.dropped)} workloads not emitted "
                f"({points}): {self.dropped[0][1]}")


def check_points(ep, draft: Draft, axes: dict[str, Axis]) -> PointCheck:
    """Split `draft.workload_points` into those the export and the emitted code hold at, and the rest.

    `axes` maps each export symbol (by name) to its axis, as `generic.symbol_axes` named them."""
    guards = _guards(ep)
    namespace: dict = {}
    exec(compile(draft.reference(), f"<reference {draft.name}>", "exec"), namespace)
    result = PointCheck()
    for point in draft.workload_points or []:
        why = _guard_broken(guards, axes, point) or _meta_run_fails(namespace["run"], draft, point)
        if why:
            result.dropped.append((point, why))
        else:
            result.kept.append(point)
    return result


def _guards(ep) -> list[tuple[object, str]]:
    """(sympy condition, text) for every range constraint and runtime assert of an export."""
    import sympy

    out = []
    for symbol, bounds in ep.range_constraints.items():
        if not isinstance(symbol, sympy.Symbol):
            continue
        low, high = bounds.lower, bounds.upper
        if low.is_finite and low > 2:  # 2 is export's own floor for a dynamic size (no 0/1 specialisation)
            out.append((symbol >= low, f"the export assumes {symbol} >= {low}"))
        if high.is_finite:
            out.append((symbol <= high, f"the export assumes {symbol} <= {high}"))
    for node in ep.graph.nodes:
        if node.op == "call_function" and getattr(node.target, "_opname", "") == "_assert_scalar":
            condition = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
            if isinstance(condition, torch.SymBool):
                expr = condition.node.expr
                out.append((expr, f"the export assumes {expr}"))
    return out


def _guard_broken(guards: list[tuple[object, str]], axes: dict[str, Axis], point: dict[str, int]) -> str:
    """The first guard that does not hold at `point`, as text with the axis names; "" when all hold."""
    import sympy

    values = {}
    for symbol, axis in axes.items():
        if axis.name in point:
            values[sympy.Symbol(symbol, integer=True, positive=True)] = point[axis.name]
    for condition, text in guards:
        by_name = {s: values[s] for s in condition.free_symbols if s in values}
        if len(by_name) != len(condition.free_symbols):
            by_name = {s: v for s in condition.free_symbols for k, v in values.items() if str(k) == str(s)}
        if len(by_name) != len(condition.free_symbols):
            continue  # a symbol no axis follows (an input the reference does not read)
        held = condition.xreplace({s: sympy.Integer(v) for s, v in by_name.items()})
        if held == sympy.false or held is False:
            for symbol, axis in axes.items():
                text = text.replace(symbol, axis.name)
            return text
    return ""


def _meta_run_fails(run, draft: Draft, point: dict[str, int]) -> str:
    """Why the emitted `run` cannot run at `point` on meta tensors, or returns other shapes; "" if it runs."""
    values = axis_values(draft, point)
    inputs = {arg.name: torch.empty(_shape(arg.shape, values), dtype=_dtype(arg.dtype), device="meta")
              for arg in draft.inputs}
    try:
        with torch.no_grad():
            got = run(**inputs)
    except Exception as exc:  # noqa: BLE001 - the reference failing at a workload's sizes is what we look for
        text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}"
        if any(marker in text for marker in _DATA_DEPENDENT):
            return ""
        return f"{RUN_FAILS} raises {text}"
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    if len(got) != len(draft.outputs):
        return f"{RUN_FAILS} returns {len(got)} outputs, the definition declares {len(draft.outputs)}"
    for arg, value in zip(draft.outputs, got):
        want = _shape(arg.shape, values)
        if tuple(value.shape) != want:
            return f"{RUN_FAILS} returns {arg.name} {tuple(value.shape)}, the definition declares {want}"
    return ""


def _shape(entries, values: dict[str, int]) -> tuple[int, ...]:
    return tuple(int(e) if e.isdigit() else int(values[e]) for e in entries or ())


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, TORCH_DTYPES[name].removeprefix("torch."))


def _label(point: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in point.items())
