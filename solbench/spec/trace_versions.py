"""Trace format versions and the migration table that brings an older line to today's shape.

pyperf-style: each version that changed what a line may hold has one step, applied in order, so a line
of any version this table knows loads; a line of a version it does not know (a newer solbench's) is
refused in one line. What is written keeps the field names SOL-ExecBench's tools read; docs/formats.md
lists the versions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from solbench.spec.errors import SpecError

TRACE_SCHEMA = "solbench.trace/2"
SOL_EXECBENCH = None  # SOL-ExecBench's own traces (and solbench's first) have no `schema`


def _from_sol_execbench(data: dict[str, Any]) -> dict[str, Any]:
    """SOL-ExecBench's trace: no solution hash; the solution may be missing."""
    data["solution"] = data.get("solution") or ""
    data["solution_hash"] = data.get("solution_hash") or ""
    return data


def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 was read leniently: numerics flags absent or null, `numerics` of another shape, phase
    timings that are not numbers; version 2 types them, so such values are normalised or dropped."""
    data = _from_sol_execbench(data)  # version 1 was read as leniently: a null solution name or hash was ""
    evaluation = data.get("evaluation")
    if not isinstance(evaluation, dict):
        return data
    evaluation = data["evaluation"] = dict(evaluation)
    correctness = evaluation.get("correctness")
    if isinstance(correctness, dict):
        correctness = evaluation["correctness"] = dict(correctness)
        correctness["flags"] = correctness.get("flags") or []
        if not isinstance(correctness.get("numerics"), dict):
            correctness["numerics"] = None
    phases = evaluation.get("phases_s")
    evaluation["phases_s"] = {str(k): float(v) for k, v in phases.items()
                              if isinstance(v, (int, float)) and not isinstance(v, bool)} \
        if isinstance(phases, dict) else {}
    return data


# version read -> (the step that brings it one version on, the version it brings it to)
MIGRATIONS: dict[str | None, tuple[Callable[[dict], dict], str]] = {
    SOL_EXECBENCH: (_from_sol_execbench, "solbench.trace/1"),
    "solbench.trace/1": (_from_v1, TRACE_SCHEMA),
}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (one decoded trace line) in the shape of TRACE_SCHEMA, or SpecError saying why not."""
    data = dict(data)
    version = data.get("schema")
    seen = set()
    while version != TRACE_SCHEMA:
        if version not in MIGRATIONS or version in seen:
            raise SpecError(f"trace format {version!r} is not one this solbench reads "
                            f"(it reads up to {TRACE_SCHEMA!r}; a newer solbench wrote it?)")
        seen.add(version)
        step, version = MIGRATIONS[version]
        data = step(data)
    data["schema"] = TRACE_SCHEMA
    return data
