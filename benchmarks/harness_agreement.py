"""What two harnesses reported for the same workloads: solbench's latencies against NVIDIA's, run to run.

    python benchmarks/harness_agreement.py --ours A.json B.json --nvidia N1/summary.json N2/summary.json

`--ours` takes `benchmarks/throughput.py --json` files, `--nvidia` the `summary.json` that NVIDIA's
`scripts/run_dataset.py` writes (`device.sh nvidia-issue15` keeps it under `$OUT/nvidia/`). Workloads are matched by
problem name and position: both harnesses take each problem's first workloads in file order, one after the
other. Per workload it prints each harness's median over its runs, how far its runs spread (max / min - 1), and
the ratio of the medians; then the same summarised for calls of a millisecond or more and for calls under
0.1 ms (docs/cluster.md keeps the H200 figures of 2026-11-28).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

LONG_MS = 1.0
SHORT_MS = 0.1


@dataclass(frozen=True)
class Agreement:
    problem: str
    index: int
    axes: str
    ours_ms: list[float]
    nvidia_ms: list[float]

    @property
    def ratio(self) -> float:
        """NVIDIA's median over solbench's: above 1, NVIDIA's harness reported the workload slower."""
        return statistics.median(self.nvidia_ms) / statistics.median(self.ours_ms)


def spread(values: list[float]) -> float:
    """How far a harness's runs of one workload lie apart: max / min - 1 (0 for a single run)."""
    return max(values) / min(values) - 1.0


def read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{what} {path}: {exc}") from None


def ours_by_workload(paths: list[Path]) -> dict[tuple[str, int], list[tuple[str, float]]]:
    """(problem, position) -> [(axes, latency_ms)] over the runs, PASSED workloads only."""
    found: dict[tuple[str, int], list[tuple[str, float]]] = {}
    for path in paths:
        saved = read_json(path, "--ours")
        rows = saved.get("rows") if isinstance(saved, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) and "problem" in r for r in rows):
            raise SystemExit(f"--ours {path}: not a --json file of benchmarks/throughput.py")
        seen: dict[str, int] = {}
        for row in rows:
            position = seen.get(row["problem"], 0)
            seen[row["problem"]] = position + 1
            if row.get("status") == "PASSED" and isinstance(row.get("latency_ms"), (int, float)):
                found.setdefault((row["problem"], position), []).append((row.get("axes", ""), row["latency_ms"]))
    return found


def is_problem_summary(entry) -> bool:
    """One problem's entry in NVIDIA's summary.json: a name and a list of latencies (ms)."""
    latencies = entry.get("latencies_ms") or [] if isinstance(entry, dict) else None
    return (isinstance(entry, dict) and "problem" in entry and isinstance(latencies, list)
            and all(isinstance(ms, (int, float)) for ms in latencies))


def nvidia_by_workload(paths: list[Path]) -> dict[tuple[str, int], list[float]]:
    """(problem, position) -> [latency_ms] over the runs; problems are named without their category."""
    found: dict[tuple[str, int], list[float]] = {}
    for path in paths:
        summary = read_json(path, "--nvidia")
        if not isinstance(summary, list) or not all(map(is_problem_summary, summary)):
            raise SystemExit(f"--nvidia {path}: not the summary.json of NVIDIA's run_dataset.py")
        for problem in summary:
            name = str(problem["problem"]).rsplit("/", 1)[-1]
            for position, latency in enumerate(problem.get("latencies_ms") or []):
                found.setdefault((name, position), []).append(float(latency))
    return found


def agreements(ours: dict, nvidia: dict) -> list[Agreement]:
    out = []
    for key in sorted(ours.keys() & nvidia.keys()):
        runs = ours[key]
        out.append(Agreement(key[0], key[1], runs[0][0], [ms for _, ms in runs], nvidia[key]))
    return out


def print_report(rows: list[Agreement], unmatched: int) -> None:
    print(f"{'problem':34} {'#':>1} {'axes':28} {'solbench ms':>11} {'spread':>7} {'NVIDIA ms':>10} {'spread':>7} {'ratio':>6}")
    for a in rows:
        print(f"{a.problem[:34]:34} {a.index:1d} {a.axes[:28]:28} {statistics.median(a.ours_ms):11.4f} "
              f"{spread(a.ours_ms):7.1%} {statistics.median(a.nvidia_ms):10.4f} {spread(a.nvidia_ms):7.1%} {a.ratio:6.2f}")
    print(f"\n{len(rows)} workloads in both harnesses" + (f", {unmatched} in only one" if unmatched else ""))
    for label, part in ((f"calls of {LONG_MS:g} ms or more", [a for a in rows if statistics.median(a.ours_ms) >= LONG_MS]),
                        (f"calls under {SHORT_MS:g} ms", [a for a in rows if statistics.median(a.ours_ms) < SHORT_MS])):
        if not part:
            continue
        ratios = [a.ratio for a in part]
        print(f"{label} ({len(part)}): NVIDIA / solbench median {statistics.median(ratios):.2f}, range "
              f"{min(ratios):.2f}-{max(ratios):.2f}; worst spread solbench {max(spread(a.ours_ms) for a in part):.1%}, "
              f"NVIDIA {max(spread(a.nvidia_ms) for a in part):.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", type=Path, nargs="+", required=True, help="benchmarks/throughput.py --json files")
    parser.add_argument("--nvidia", type=Path, nargs="+", required=True, help="NVIDIA run_dataset.py summary.json files")
    args = parser.parse_args(argv)
    ours, nvidia = ours_by_workload(args.ours), nvidia_by_workload(args.nvidia)
    rows = agreements(ours, nvidia)
    if not rows:
        raise SystemExit("no workload is in both harnesses' results (problems are matched by name)")
    print_report(rows, len(ours.keys() ^ nvidia.keys()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
