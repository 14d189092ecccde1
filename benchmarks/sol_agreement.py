"""Agreement of the `solar` bounds with a published per-workload B200 `sol_ms` CSV.

    python benchmarks/sol_agreement.py [CSV] [--shared DIR] [--jobs N] [--save FILE.jsonl]
    python benchmarks/sol_agreement.py [CSV] --from FILE.jsonl [--problem NAME ...]

The CSV has the columns category, name, uuid and sol_ms (`published_b200_sol_half.csv`,
`calibration_b200.csv` with `workload_uuid`). Every workload it names is analysed under the
`solar` convention on the `B200` spec (the leaderboard's locked clocks), one problem per task in a
pool of N processes, and the ratio ours / published is reported: the share within +-10 % by
category, the ratio buckets of the misses, and the problems where most workloads miss, worst
first. `--from` reads the records a previous `--save` (or `sol_changes.py sweep`) wrote instead
of analysing; `--problem` prints each workload of the named problems (name prefix) with its
bytes, matmul FLOPs and binding resource, to find out why it differs.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT.parent / "shared" / "sol-execbench"
DEFAULT_CSV = DEFAULT_DIR / "published_b200_sol_half.csv"
WITHIN = 0.10
CATEGORIES = ("FlashInfer-Bench", "L1", "L2", "Quant")
BUCKETS = ((0.0, 0.5, "below 0.5"), (0.5, 1 - WITHIN, f"0.5-{1 - WITHIN:g}"),
           (1 + WITHIN, 2.0, f"{1 + WITHIN:g}-2"), (2.0, float("inf"), "above 2"))


def read_published(path: Path) -> dict[tuple[str, str], float]:
    """Published sol_ms by (CATEGORY/NAME, uuid)."""
    return {k: ms for k, (ms, _) in _read(path).items()}


def rounding_ms(text: str) -> float:
    """Half a unit of the last decimal a published value shows (`0.0007` -> 0.00005 ms); 0 when it
    is written with an exponent (`8e-08`: its digits are all significant)."""
    text = text.strip()
    if "e" in text.lower() or "." not in text:
        return 0.0
    return 0.5 * 10.0 ** -len(text.split(".")[1])


def _read(path: Path) -> dict[tuple[str, str], tuple[float, float]]:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if not rows or "sol_ms" not in rows[0] or "category" not in rows[0]:
        raise SystemExit(f"{path}: not a published sol_ms CSV (needs category, name, uuid, sol_ms columns)")
    return {(f"{r['category']}/{r['name']}", r.get("uuid") or r["workload_uuid"]):
            (float(r["sol_ms"]), rounding_ms(r["sol_ms"])) for r in rows}


def _analyse_problem(path: str) -> list[dict]:
    sys.path.insert(0, str(ROOT))
    from solbench.sol.analyser import analyse_workload, sol_time_ms  # heavy (torch): in the pool process
    from solbench.sol.hardware import load_spec  # see above
    from solbench.spec.problem import load_problem  # see above

    hw = load_spec("B200")
    problem = load_problem(Path(path))
    key = f"{Path(path).parent.name}/{problem.name}"
    records = []
    for w in problem.workloads:
        cost = analyse_workload(problem.definition, w, convention="solar")
        bound = sol_time_ms(cost, hw)
        records.append({"problem": key, "uuid": w.uuid, "axes": w.axes,
                        "solar": {"t_sol_ms": bound.t_sol_ms, "bytes": cost.bytes_min, "binding": bound.binding,
                                  "flops_matmul": cost.flops_matmul_total, "method": cost.method,
                                  "bytes_by_tensor": cost.bytes_by_tensor}})
    return records


def analyse_all(shared: Path, problems: set[str], jobs: int) -> list[dict]:
    paths = [str(shared / p) for p in sorted(problems) if (shared / p).is_dir()]
    with ProcessPoolExecutor(jobs) as pool:
        return [r for records in pool.map(_analyse_problem, paths) for r in records]


def ratios_of(published: dict, records: list[dict]) -> dict[tuple[str, str], float]:
    ours = {(r["problem"], r["uuid"]): r["solar"]["t_sol_ms"] for r in records if "uuid" in r}
    return {k: ours[k] / ms for k, ms in published.items() if k in ours and ms > 0}


def _within(ratio: float) -> bool:
    return abs(ratio - 1) <= WITHIN


def within_rounding(table: dict, ratios: dict) -> set:
    """Misses that the published value's rounding explains: ours is within 10 % of some value that
    rounds to the published one."""
    found = set()
    for key, x in ratios.items():
        ms, half = table[key]
        ours = x * ms
        if not _within(x) and half > 0 and (1 - WITHIN) * (ms - half) <= ours <= (1 + WITHIN) * (ms + half):
            found.add(key)
    return found


def report(ratios: dict[tuple[str, str], float], worst: int = 25, rounded: set | None = None) -> str:
    """The agreement table by category, the buckets of the misses, the problems most workloads miss.
    `rounded`: the workloads outside +-10 % only by the published value's own rounding."""
    lines = []
    total = len(ratios)
    hits = sum(_within(x) for x in ratios.values())
    lines.append(f"{total} workloads, {len({k[0] for k in ratios})} problems: "
                 f"{hits / max(total, 1):.1%} within +-{WITHIN:.0%}")
    if rounded:
        lines.append(f"{(hits + len(rounded)) / max(total, 1):.1%} within +-{WITHIN:.0%} or the published "
                     f"value's rounding ({len(rounded)} more: published to 0.0001 ms, e.g. 0.0007)")
    by_category = defaultdict(list)
    for (problem, _), x in ratios.items():
        by_category[problem.split("/")[0]].append(x)
    names = [c for c in CATEGORIES if c in by_category] + sorted(set(by_category) - set(CATEGORIES))
    lines.append("| category | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    lines.append("| within +-10% | " + " | ".join(
        f"{sum(map(_within, by_category[c])) / len(by_category[c]):.1%}" for c in names) + " |")
    misses = [x for x in ratios.values() if not _within(x)]
    lines.append(f"{len(misses)} misses: " + ", ".join(
        f"{sum(lo <= x < hi for x in misses)} {label}" for lo, hi, label in BUCKETS))
    by_problem = defaultdict(list)
    for (problem, _), x in ratios.items():
        by_problem[problem].append(x)
    bad = [(p, xs) for p, xs in by_problem.items() if sum(not _within(x) for x in xs) * 2 > len(xs)]
    bad.sort(key=lambda px: -abs(statistics.median(px[1]) - 1) if statistics.median(px[1]) >= 1
             else -abs(1 / statistics.median(px[1]) - 1))
    lines.append(f"{len(bad)} problems with more than half of their workloads outside +-{WITHIN:.0%}:")
    lines.append("| problem | missed | median ratio | range |")
    lines.append("|---|---|---|---|")
    for p, xs in bad[:worst]:
        lines.append(f"| {p} | {sum(not _within(x) for x in xs)}/{len(xs)} | {statistics.median(xs):.3g} | "
                     f"{min(xs):.3g}-{max(xs):.3g} |")
    return "\n".join(lines)


def detail(published: dict, records: list[dict], prefix: str) -> str:
    lines = []
    for r in records:
        if "uuid" not in r or not r["problem"].split("/")[-1].startswith(prefix):
            continue
        ms = published.get((r["problem"], r["uuid"]))
        s = r["solar"]
        lines.append(f"{r['problem']} {json.dumps(r.get('axes', {}))} ours {s['t_sol_ms']:.5g} published "
                     f"{ms if ms is not None else '-'} bytes {s['bytes']:.4g} mm {s['flops_matmul']:.4g} "
                     f"{s.get('binding', '')} {s['method']}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", type=Path, nargs="?", default=DEFAULT_CSV)
    parser.add_argument("--shared", type=Path, default=DEFAULT_DIR, help="the problems' folder")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--save", type=Path, help="write the analysed records here (JSON lines)")
    parser.add_argument("--from", dest="source", type=Path, help="read records instead of analysing")
    parser.add_argument("--problem", action="append", default=[], help="print this problem's workloads")
    parser.add_argument("--worst", type=int, default=25, help="how many problems to list")
    args = parser.parse_args()
    if not args.csv.is_file():
        print(f"no published CSV at {args.csv}", file=sys.stderr)
        return 2
    table = _read(args.csv)
    published = {k: ms for k, (ms, _) in table.items()}
    if args.source:
        records = [json.loads(line) for line in args.source.read_text().splitlines() if line.strip()]
    else:
        records = analyse_all(args.shared, {k[0] for k in published}, args.jobs)
    if args.save:
        args.save.write_text("".join(json.dumps(r) + "\n" for r in records))
    ratios = ratios_of(published, records)
    if not ratios:
        print("no workload of the CSV was analysed", file=sys.stderr)
        return 1
    print(report(ratios, args.worst, within_rounding(table, ratios)))
    for prefix in args.problem:
        print(detail(published, records, prefix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
