"""Speed-of-light bounds over the whole shared dataset: a sweep, and a before/after comparison.

    python benchmarks/sol_changes.py sweep [SHARED_DIR] --out FILE.jsonl [--jobs N] [--problems GLOB]
    python benchmarks/sol_changes.py compare BEFORE.jsonl AFTER.jsonl [--calibration CSV]

`sweep` analyses every workload of every problem (both conventions, the B200 spec) with whatever
solbench the PYTHONPATH gives, one problem per task in a pool of N processes, and writes one JSON
record per workload plus one `{"problem": ..., "seconds": ...}` line per problem. Running it with
the old code's PYTHONPATH, then the new one's, gives the two files `compare` reads.

`compare` prints, per class of change, how many workloads moved by more than 10 % (strict and
solar), the slowest problems, and the agreement of the solar bounds with the published B200
figures of `calibration_b200.csv` before and after (the only published per-workload data used).
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT.parent / "shared" / "sol-execbench"
CHANGE = 0.10
# The classes issue 16 fixes, by problem (category/name prefix), to attribute changes.
CLASSES = {
    "paged-kv": ["FlashInfer-Bench/012", "FlashInfer-Bench/013", "FlashInfer-Bench/014", "FlashInfer-Bench/015",
                 "FlashInfer-Bench/018", "FlashInfer-Bench/019"],
    "moe-one-hot": ["L1/044", "L2/008", "L2/009", "L2/010", "L2/016", "L2/029", "L2/081", "L2/082",
                    "L2/013", "L2/025", "L2/061"],  # 013, 025: one_hot's scatter form of known ids
    "tolist-inputs": ["L1/021", "L1/023", "L2/017", "L2/018", "Quant/031"],
}


def _analyse_problem(path: str) -> list[dict]:
    sys.path.insert(0, str(ROOT))
    from solbench.sol.analyser import analyse_workload, sol_time_ms  # heavy (torch): in the pool process
    from solbench.sol.hardware import load_spec  # see above
    from solbench.spec.problem import load_problem  # see above

    hw = load_spec("B200")
    start = time.perf_counter()
    problem = load_problem(Path(path))
    key = f"{Path(path).parent.name}/{problem.name}"
    records = []
    for w in problem.workloads:
        record = {"problem": key, "uuid": w.uuid}
        for convention in ("strict", "solar"):
            cost = analyse_workload(problem.definition, w, convention=convention)
            bound = sol_time_ms(cost, hw)
            record[convention] = {"t_sol_ms": bound.t_sol_ms, "bytes": cost.bytes_min,
                                  "flops_matmul": cost.flops_matmul_total, "method": cost.method}
        records.append(record)
    records.append({"problem": key, "seconds": time.perf_counter() - start, "workloads": len(problem.workloads)})
    return records


def sweep(args) -> int:
    sys.path.insert(0, str(ROOT))
    from solbench.spec.problem import discover_problems  # light, but after the path is set

    paths = [p for p in discover_problems(args.shared)
             if not args.problems or fnmatch.fnmatch(f"{p.parent.name}/{p.name}", args.problems)]
    start = time.perf_counter()
    with open(args.out, "w") as out, ProcessPoolExecutor(args.jobs) as pool:
        for records in pool.map(_analyse_problem, [str(p) for p in paths]):
            for r in records:
                out.write(json.dumps(r) + "\n")
            out.flush()
    print(f"{len(paths)} problems in {time.perf_counter() - start:.1f} s with {args.jobs} processes -> {args.out}")
    return 0


def _load(path: Path, names: dict[str, str]) -> tuple[dict, dict]:
    """Records by (CATEGORY/NAME, uuid), and seconds per problem; reads `sweep` output or the JSON
    lines of `solbench sol --json` (whose records name the problem without its category)."""
    records, seconds = {}, {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if "seconds" in r:
            seconds[r["problem"]] = r["seconds"]
            continue
        if "problem" not in r:  # solbench sol --json
            r = {"problem": names.get(r["definition"], r["definition"]), "uuid": r["uuid"],
                 **{c: {"t_sol_ms": r[c]["t_sol_ms"], "bytes": r[c]["bytes"],
                        "flops_matmul": sum(r[c]["flops_matmul"].values()), "method": r["method"]}
                    for c in ("strict", "solar")}}
        records[(r["problem"], r["uuid"])] = r
    return records, seconds


def _class_of(problem: str) -> str:
    for name, prefixes in CLASSES.items():
        if any(problem.startswith(p) for p in prefixes):
            return name
    return "nvfp4-matmul" if problem.startswith("Quant/") else "other"


def _agreement(records: dict, calibration: Path) -> str:
    ratios = []
    with open(calibration) as f:
        for row in csv.DictReader(f):
            r = records.get((f"{row['category']}/{row['name']}", row["workload_uuid"]))
            if r is not None:
                ratios.append(r["solar"]["t_sol_ms"] / float(row["sol_ms"]))
    if not ratios:
        return "no calibration workloads"
    logs = [math.log(x) for x in ratios if x > 0]
    return (f"{len(ratios)} workloads, median ratio {statistics.median(ratios):.3f}, geometric spread "
            f"x{math.exp(statistics.pstdev(logs)):.2f}, within 10 %: "
            f"{sum(abs(x - 1) <= CHANGE for x in ratios) / len(ratios):.0%}")


def compare(args) -> int:
    sys.path.insert(0, str(ROOT))
    from solbench.spec.problem import discover_problems  # light, but after the path is set

    names = {}
    if args.calibration.parent.is_dir():
        names = {p.name: f"{p.parent.name}/{p.name}" for p in discover_problems(args.calibration.parent)}
    before, t_before = _load(args.before, names)
    after, t_after = _load(args.after, names)
    counts: dict = defaultdict(lambda: [0, 0, 0, []])  # class -> [workloads, strict changed, solar changed, ratios]
    others: dict = defaultdict(int)  # changed problems outside the known classes
    for key, new in after.items():
        old = before.get(key)
        if old is None:
            continue
        row = counts[_class_of(key[0])]
        row[0] += 1
        for i, convention in ((1, "strict"), (2, "solar")):
            a, b = old[convention]["t_sol_ms"], new[convention]["t_sol_ms"]
            if a > 0 and abs(b / a - 1) > CHANGE:
                row[i] += 1
                if convention == "strict":
                    row[3].append(b / a)
                    if _class_of(key[0]) == "other":
                        others[key[0]] += 1
    print(f"{'class':15s} {'workloads':>9s} {'strict >10%':>11s} {'solar >10%':>10s}  median new/old (strict, changed)")
    for name, (n, s, o, ratios) in sorted(counts.items()):
        med = f"{statistics.median(ratios):.3g}" if ratios else "-"
        print(f"{name:15s} {n:9d} {s:11d} {o:10d}  {med}")
    if others:
        print("changed outside the classes: " + ", ".join(f"{k} ({v})" for k, v in sorted(others.items())))
    for label, records in (("before", before), ("after", after)):
        methods = defaultdict(int)
        for r in records.values():
            methods[r["strict"]["method"]] += 1
        print(f"{label}: methods {dict(methods)}")
        if args.calibration.exists():
            print(f"{label}: calibration {_agreement(records, args.calibration)}")
    for label, seconds in (("before", t_before), ("after", t_after)):
        slow = sorted(seconds.items(), key=lambda kv: -kv[1])[:5]
        print(f"{label}: sum of per-problem seconds {sum(seconds.values()):.0f}; slowest "
              + ", ".join(f"{k} {v:.0f}s" for k, v in slow))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sweep")
    s.add_argument("shared", type=Path, nargs="?", default=DEFAULT_DIR)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--jobs", type=int, default=2)
    s.add_argument("--problems", help="only problems matching this glob (CATEGORY/NAME)")
    s.set_defaults(func=sweep)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--calibration", type=Path, default=DEFAULT_DIR / "calibration_b200.csv")
    c.set_defaults(func=compare)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
