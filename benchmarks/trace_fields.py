"""Compare two trace files field for field: the same workloads, the same fields, the same values where
a run repeats them.

Written for issue 34 (typed trace models): traces of `solbench run` before and after a change to the
formats must agree except in the version field. Values that differ run to run (times, timestamps, logs,
sandbox notes) are compared by presence and type only; everything else by value.

    git archive main | tar -x -C /tmp/base && (cd /tmp/base && PYTHONPATH=$PWD solbench run ... -o before.jsonl)
    solbench run ... -o after.jsonl          # the same problems, solutions, --seed and --max-workloads
    python3 benchmarks/trace_fields.py before.jsonl after.jsonl

Prints one line per difference and a summary; exit status 1 where they differ.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# Fields whose values differ from one run to the next; compared by type (None matches anything there).
VOLATILE = {"timestamp", "log", "seconds", "phases_s", "signature", "hostname", "sandbox", "clocks_start",
            "clocks_end", "latency", "reference_latency", "latency_ms", "reference_latency_ms",
            "speedup_factor", "host_launch_ms", "gpu_busy_ms", "kernel_sum_ms", "t_baseline_ms",
            "baselines_ms", "achieved_tflops", "achieved_gbps", "sol_fraction", "score", "log_score",
            "max_absolute_error", "max_relative_error", "matched_ratio", "numerics", "warnings", "message",
            "checked_timed_iterations"}  # how many timed calls were sampled depends on how long blocks ran
VERSION = "schema"


def differences(before: Any, after: Any, path: str = "") -> list[str]:
    """Every place where `after` differs from `before`: a field added or gone, or a changed value."""
    if isinstance(before, dict) and isinstance(after, dict):
        found = [f"{path}.{k}: gone" for k in before if k not in after]
        found += [f"{path}.{k}: new" for k in after if k not in before]
        for key in before.keys() & after.keys():
            if key == VERSION and not path:
                continue
            if key in VOLATILE:
                if before[key] is not None and after[key] is not None and type(before[key]) is not type(after[key]):
                    found.append(f"{path}.{key}: {type(before[key]).__name__} -> {type(after[key]).__name__}")
                continue
            found += differences(before[key], after[key], f"{path}.{key}")
        return found
    if type(before) is not type(after) or before != after:
        return [f"{path}: {before!r} -> {after!r}"]
    return []


def read(path: Path) -> dict[tuple, dict]:
    traces = {}
    for line in path.read_text().splitlines():
        if line.strip():
            data = json.loads(line)
            traces[(data["definition"], data["solution_hash"], data["workload"]["uuid"])] = data
    return traces


def compare(before_path: Path, after_path: Path) -> list[str]:
    before, after = read(before_path), read(after_path)
    found = [f"{key}: only before" for key in before.keys() - after.keys()]
    found += [f"{key}: only after" for key in after.keys() - before.keys()]
    for key in sorted(before.keys() & after.keys()):
        found += [f"{key[0]}/{key[2][:8]}{d}" for d in differences(before[key], after[key])]
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: trace_fields.py BEFORE.jsonl AFTER.jsonl", file=sys.stderr)
        return 2
    found = compare(Path(argv[0]), Path(argv[1]))
    for line in found:
        print(line)
    pairs = len(read(Path(argv[0])).keys() & read(Path(argv[1])).keys())
    print(f"{pairs} traces in both, {len(found)} differences (the version field aside)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
