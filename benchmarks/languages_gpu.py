"""Every example solution of every kernel language on a GPU, with CUDA graphs on and off (issue 33).

    python benchmarks/languages_gpu.py                    # every example in solutions/, every workload
    python benchmarks/languages_gpu.py --max-workloads 3 --only cute_dsl cutlass

Prints one row per (example, timing mode): its language, problem, the statuses of its workloads, the
median latency over its workloads and the mean SOL score (on the GPU's own bounds), then the first log
line of every workload that did not pass. A cuTile solution is judged too: on Hopper it must end SKIPPED
with the tileiras reason; elsewhere it must pass. Exit status 1 when an example did not pass everywhere
(SKIPPED for a missing package counts as a failure here: this run is meant to judge every language).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CUTILE_AXPY = '''import cuda.tile as ct
import torch

TILE = 32  # divides the suite problem's sizes (64, 96): no partial tile


@ct.kernel
def _axpy(x, y, out):
    block = ct.bid(0)
    a = ct.load(x, index=(block,), shape=(TILE,))
    b = ct.load(y, index=(block,), shape=(TILE,))
    ct.store(out, index=(block,), tile=a * 2.0 + b)


def run(x, y, out):
    grid = ((x.shape[0] + TILE - 1) // TILE, 1, 1)
    ct.launch(torch.cuda.current_stream(), grid, _axpy, (x, y, out))
'''


def examples(only: list[str] | None) -> list[tuple[Path, str, str]]:
    """(solution file, language, problem) of every example in solutions/."""
    from solbench.spec import load_solution

    found = []
    for path in sorted((ROOT / "solutions").glob("*/*")):
        path = path / "solution.json" if path.is_dir() else path
        if not path.is_file() or path.suffix not in (".py", ".cu", ".json"):
            continue
        solution = load_solution(path)
        language = solution.spec.languages[0]
        if only and language not in only:
            continue
        found.append((path, language, solution.definition))
    return found


def judge(problem: Path, solution, graphs: bool, max_workloads: int | None) -> list:
    from solbench.api import evaluate

    return evaluate(problem, solution, device="cuda", cuda_graphs=graphs, max_workloads=max_workloads)


def row(traces) -> tuple[str, str, str]:
    statuses = Counter(t.evaluation.status.value for t in traces)
    latencies = [t.evaluation.performance.latency_ms for t in traces
                 if t.evaluation.performance and t.evaluation.performance.latency_ms]
    scores = [t.evaluation.sol["score"] for t in traces if t.evaluation.sol and t.evaluation.sol.get("score")]
    latency = f"{statistics.median(latencies):.4f}" if latencies else "-"
    score = f"{statistics.mean(scores):.3f}" if scores else "-"
    return " ".join(f"{n}x{s}" for s, n in sorted(statuses.items())), latency, score


def cutile_case(max_workloads: int | None) -> tuple[str, bool]:
    """The cuTile axpy on the anti-cheat suite's problem: SKIPPED for Hopper's reason there, else PASSED."""
    import torch

    from solbench.spec.solution import Solution
    from tests.anticheat.suite import write_problem

    folder = write_problem(Path(tempfile.mkdtemp(prefix="solbench_cutile_")))
    solution = Solution.from_dict({
        "name": "cutile_axpy", "definition": folder.name, "author": "solbench",
        "spec": {"languages": ["cutile"], "entry_point": "axpy.py::run", "destination_passing_style": True},
        "sources": [{"path": "axpy.py", "content": CUTILE_AXPY}]})
    traces = judge(folder, solution, True, max_workloads)
    statuses = {t.evaluation.status.value for t in traces}
    hopper = torch.cuda.get_device_capability()[0] == 9
    log = traces[0].evaluation.log.splitlines()[0] if traces and traces[0].evaluation.log else ""
    ok = statuses == {"SKIPPED"} and "Hopper" in log if hopper else statuses == {"PASSED"}
    return f"cutile axpy (ac_axpy): {sorted(statuses)} {log[:150]}", ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-workloads", type=int, default=None)
    parser.add_argument("--only", nargs="*", help="languages to run (default: all)")
    args = parser.parse_args(argv)
    import torch

    print(f"GPU: {torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))})")
    failures, lines = [], []
    header = f"{'language':15} {'problem':30} {'example':22} {'graphs':6} {'statuses':22} {'median ms':>10} {'SOL':>6}"
    for path, language, problem_name in examples(args.only):
        problem = ROOT / "problem_defs" / "core" / problem_name
        for graphs in (True, False):
            traces = judge(problem, str(path), graphs, args.max_workloads)
            statuses, latency, score = row(traces)
            name = path.parent.name if path.name == "solution.json" else path.name
            lines.append(f"{language:15} {problem_name:30} {name:22} {'on' if graphs else 'off':6} {statuses:22} "
                         f"{latency:>10} {score:>6}")
            print(lines[-1] if len(lines) > 1 else header + "\n" + lines[-1], flush=True)
            for t in traces:
                if t.evaluation.status.value != "PASSED":
                    first = (t.evaluation.log or "").strip().splitlines()[:1]
                    failures.append(f"{name} graphs={'on' if graphs else 'off'} {t.workload_uuid[:8]} "
                                    f"{t.evaluation.status.value}: {first[0][:200] if first else ''}")
    if not args.only or "cutile" in args.only:
        text, ok = cutile_case(args.max_workloads)
        print(text)
        if not ok:
            failures.append(text)
    print(f"\n{len(failures)} not as expected")
    for line in failures:
        print("  " + line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
