"""Workload shapes and tolerances for extracted problems.

Each shape set spans serving and training sizes (small-M decode to long prefill). The first two
entries are deliberately tiny: the CPU smoke run executes only `--max-workloads 2`.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from solbench.extract.draft import Draft
from solbench.spec import axes as axes_expr
from solbench.spec import dtypes
from solbench.spec.errors import SpecError

_NAMESPACE = uuid.UUID("5a1b3e4c-0d2f-4b8e-9c61-7e2f5d9a0b17")

SHAPE_SETS: dict[str, tuple[tuple[str, ...], list[tuple[int, ...]]]] = {
    # token-parallel ops (norms, MLPs, routers, experts, embeddings): a flat token count
    "tokens": (("num_tokens",), [(4,), (16,), (1,), (8,), (32,), (64,), (128,), (256,), (512,), (1024,),
                                 (2048,), (4096,), (8192,), (16384,)]),
    "logits": (("num_tokens",), [(4,), (16,), (1,), (8,), (32,), (64,), (128,), (256,), (512,), (1024,),
                                 (2048,), (4096,)]),
    "prefill": (("batch_size", "seq_len"), [(1, 16), (2, 32), (1, 128), (1, 512), (1, 1024), (1, 2048),
                                            (1, 4096), (1, 8192), (1, 16384), (2, 4096), (4, 1024),
                                            (8, 512), (16, 256)]),
    "decode": (("batch_size", "kv_len"), [(1, 16), (2, 64), (1, 512), (1, 4096), (1, 32768), (8, 1024),
                                          (16, 2048), (32, 4096), (64, 1024), (64, 8192), (128, 2048),
                                          (256, 512)]),
    "layer": (("batch_size", "seq_len"), [(1, 8), (1, 32), (1, 128), (1, 512), (1, 2048), (1, 4096),
                                          (1, 8192), (2, 2048), (4, 1024), (8, 256), (16, 128)]),
    "train_tokens": (("num_tokens",), [(16,), (64,), (512,), (1024,), (2048,), (4096,), (8192,), (16384,),
                                       (32768,)]),
    "train": (("batch_size", "seq_len"), [(1, 16), (2, 32), (1, 512), (1, 1024), (1, 2048), (1, 4096),
                                          (2, 2048), (4, 1024), (8, 512), (1, 8192)]),
    "images": (("batch_size",), [(1,), (2,), (4,), (8,), (16,), (32,), (64,), (128,), (256,)]),
}
# Above this many bytes of inputs and outputs a workload would not fit next to its reference on a
# single 80 GB GPU; such shapes are dropped (the set keeps at least 8).
MAX_WORKLOAD_BYTES = 24 * 2**30


@dataclass(frozen=True)
class ToleranceRule:
    atol: float
    rtol: float
    matched: float = 0.99


_BASE = {"float32": ToleranceRule(1e-4, 1e-4), "float16": ToleranceRule(2e-3, 2e-3),
         "bfloat16": ToleranceRule(1e-2, 2e-2)}


def tolerance(draft: Draft) -> dict:
    rule = _BASE.get(draft.dtype, _BASE["bfloat16"])
    s = draft.tolerance_scale
    return {"max_atol": rule.atol * s, "max_rtol": rule.rtol * s, "required_matched_ratio": rule.matched}


def axis_values(draft: Draft, axes: dict[str, int]) -> dict[str, int]:
    """Every axis's value at a workload point: consts, the point's var axes, then the expression axes
    (generic drafts: `dim_0 = 2 * height`), in whatever order they depend on each other."""
    values = {name: spec[1] for name, spec in draft.axes.items() if spec[0] == "const"} | dict(axes)
    pending = {name: spec[1] for name, spec in draft.axes.items() if spec[0] == "expr" and name not in axes}
    while pending:
        done = {}
        for name, text in pending.items():
            try:
                done[name] = int(axes_expr.evaluate(text, values))
            except SpecError:  # names an axis not evaluated yet (or a real error, raised below)
                continue
        if not done:
            name, text = next(iter(pending.items()))
            axes_expr.evaluate(text, values)  # raises the SpecError that says why
        values |= done
        pending = {n: t for n, t in pending.items() if n not in done}
    return values


def workload_bytes(draft: Draft, axes: dict[str, int]) -> int:
    values = axis_values(draft, axes)
    total = 0
    for arg in (*draft.inputs, *draft.outputs):
        if arg.shape is None:
            continue
        n = 1
        for entry in arg.shape:
            n *= int(entry) if entry.isdigit() else values[entry]
        total += n * dtypes.storage_bits(arg.dtype) // 8
    return total


def workloads(draft: Draft) -> list[dict]:
    """The workload.jsonl records of a draft, smallest two first, ids stable across runs."""
    if draft.workload_points is not None:
        points = draft.workload_points
    else:
        names, shapes = SHAPE_SETS[draft.shapes]
        points = [dict(zip(names, shape)) for shape in shapes]
    chosen = []
    for axes in points:
        if len(chosen) >= 8 and workload_bytes(draft, axes) > MAX_WORKLOAD_BYTES:
            continue
        chosen.append(axes)
    records = []
    for axes in chosen:
        key = f"{draft.name}/{json.dumps(axes, sort_keys=True)}"
        records.append({
            "uuid": str(uuid.uuid5(_NAMESPACE, key)),
            "axes": axes,
            "inputs": {arg.name: {"type": "custom"} for arg in draft.inputs},
            "tolerance": tolerance(draft),
        })
    return records
