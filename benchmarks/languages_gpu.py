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


_EVALUATOR = None
DEVICE = "cuda"


def judge(problem: Path, solution, graphs: bool, max_workloads: int | None) -> list:
    """One evaluation; the workers are kept between them (api.Evaluator), each solution in a fresh process."""
    global _EVALUATOR
    from solbench.api import Evaluator

    if _EVALUATOR is None:
        _EVALUATOR = Evaluator(device=DEVICE)
    return _EVALUATOR.evaluate(problem, solution, cuda_graphs=graphs, max_workloads=max_workloads)


def row(traces) -> tuple[str, str, str]:
    statuses = Counter(t.evaluation.status.value for t in traces)
    latencies = [t.evaluation.performance.latency_ms for t in traces
                 if t.evaluation.performance and t.evaluation.performance.latency_ms]
    scores = [t.evaluation.sol["score"] for t in traces if t.evaluation.sol and t.evaluation.sol.get("score")]
    latency = f"{statistics.median(latencies):.4f}" if latencies else "-"
    score = f"{statistics.mean(scores):.3f}" if scores else "-"
    return " ".join(f"{n}x{s}" for s, n in sorted(statuses.items())), latency, score


def cutile_case(max_workloads: int | None) -> tuple[str, bool]:
    """A cuTile axpy (tests/languages): SKIPPED for Hopper's reason there, else PASSED."""
    import torch

    from tests.languages.test_languages_gpu import cutile_axpy_file
    from tests.runner.conftest import write_problem

    folder = Path(tempfile.mkdtemp(prefix="solbench_cutile_"))
    traces = judge(write_problem(folder / "problems"), str(cutile_axpy_file(folder)), True, max_workloads)
    statuses = {t.evaluation.status.value for t in traces}
    hopper = torch.cuda.get_device_capability()[0] == 9
    log = traces[0].evaluation.log.splitlines()[0] if traces and traces[0].evaluation.log else ""
    ok = statuses == {"SKIPPED"} and "Hopper" in log if hopper else statuses == {"PASSED"}
    return f"cutile axpy (axpy_fp32): {sorted(statuses)} {log[:150]}", ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-workloads", type=int, default=None)
    parser.add_argument("--only", nargs="*", help="languages to run (default: all; the issue-33 ones: "
                        "--only cute_dsl cudnn_frontend cutlass cudnn cublas cutile)")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of this script (GPU languages SKIPPED)")
    args = parser.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    try:
        return report(args)
    finally:
        if _EVALUATOR is not None:
            _EVALUATOR.close()


def report(args: argparse.Namespace) -> int:
    import torch

    if DEVICE != "cpu":
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
    if DEVICE != "cpu" and (not args.only or "cutile" in args.only):
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
