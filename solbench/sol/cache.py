"""On-disk cache of speed-of-light analyses, shared by `solbench sol` and `solbench run`.

Tracing a reference costs from milliseconds to tens of seconds per workload and its result depends
only on the definition, the workload's axes and scalars, the convention and the analyser's code.
So each `WorkloadCost` is stored as one JSON file named by a hash of exactly those:

- the definition's full JSON (reference source, shapes, dtypes, axes);
- the resolved axes and the scalar inputs;
- the convention;
- the analyser version: a hash of the source of every module of `solbench.sol`, so any change of
  the analyser invalidates every entry without anyone having to bump a number.

The hardware is deliberately not part of the key: a `WorkloadCost` is FLOPs and bytes, and the
time on a GPU (`sol_time_ms`) is computed from it at once. Location: `$SOLBENCH_SOL_CACHE`, else
`$XDG_CACHE_HOME/solbench/sol`, else `~/.cache/solbench/sol`; `SOLBENCH_SOL_CACHE=off` disables it.
An entry that cannot be read or does not parse (a crash mid-write, a disk error, a hand edit) is
ignored and recomputed, never an error; writes are atomic (a temporary file, then a rename), so
concurrent processes never see half an entry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from solbench.spec.definition import Definition

if TYPE_CHECKING:
    from solbench.sol.analyser import WorkloadCost

ENV = "SOLBENCH_SOL_CACHE"
DISABLED = ("off", "0", "no", "false")


def cache_dir() -> Path | None:
    """Where entries live, or None when caching is switched off."""
    value = os.environ.get(ENV)
    if value is not None:
        return None if value.strip().lower() in DISABLED else Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "solbench" / "sol"


@lru_cache(maxsize=1)
def analyser_version() -> str:
    """A hash of every `solbench.sol` module's source: changes whenever the analyser does."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def entry_key(definition: Definition, axis_values: dict, convention: str, scalars: dict | None) -> str:
    payload = json.dumps({"definition": definition.to_dict(), "axes": axis_values, "scalars": scalars or {},
                          "convention": convention, "version": analyser_version()},
                         sort_keys=True, default=repr)
    return hashlib.sha256(payload.encode()).hexdigest()


def read_entry(path: Path) -> WorkloadCost | None:
    """The analysis stored at `path`; None when it cannot be read (it is then recomputed)."""
    from solbench.sol.analyser import WorkloadCost  # inner: torch; finding an entry (`entry_file`) needs none

    fields = {f.name for f in dataclasses.fields(WorkloadCost)}
    try:
        data = json.loads(path.read_text())
        cost = WorkloadCost(**{k: v for k, v in data.items() if k in fields})
    except Exception:  # unreadable, truncated or foreign: recompute (the cache is never authoritative)
        return None
    numbers = [cost.bytes_min, cost.flops_other, cost.output_bytes, *cost.flops_matmul.values()]
    if not all(isinstance(x, (int, float)) for x in numbers) or not isinstance(cost.notes, list):
        return None
    return cost


def _write(path: Path, cost: WorkloadCost) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    except OSError:
        return  # a read-only or full disk costs speed, never the result
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(dataclasses.asdict(cost), f)
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        Path(tmp).unlink(missing_ok=True)


def cached_analyse(definition: Definition, axis_values: dict[str, int], *, convention: str = "strict",
                   scalars: dict | None = None) -> WorkloadCost:
    """`analyse`, through the on-disk cache (same arguments, same result)."""
    from solbench.sol.analyser import analyse  # inner: torch, as in `read_entry`

    path = _entry_path(definition, axis_values, convention, scalars)
    cost = read_entry(path) if path is not None and path.exists() else None
    if cost is None:
        cost = analyse(definition, axis_values, convention=convention, scalars=scalars)
        if path is not None:
            _write(path, cost)
    return cost


def _entry_path(definition: Definition, axis_values: dict[str, int], convention: str,
                scalars: dict | None) -> Path | None:
    return entry_file(entry_key(definition, dict(axis_values), convention, scalars))


def entry_file(key: str) -> Path | None:
    """Where the entry of `entry_key` `key` lives (it may not exist yet); None when caching is off. Finding
    it imports no torch: a run's driver looks for every workload's entry before its own torch import."""
    root = cache_dir()
    return None if root is None else root / f"{key}.json"
