"""`solbench gate`: the CI gate for kernel PRs, with nothing in it that the PR's tree can configure.

`pytest --solbench` runs inside pytest, which obeys the tree it runs in: a `conftest.py`, a `pytest.ini`
with `addopts = -p plugin`, or a `pytest_sessionfinish` hook can turn a failed item into a pass or the
exit status into 0 (solbench/gate/integrity.py refuses the ones it can see, but code in the same process
can always reach around a check). This command does not start pytest: it evaluates the solution files
through `solbench run` (worker processes, sandbox, signed traces) in an isolated interpreter started outside
the tree (`gate/isolated.py`), after taking the tree off its own `sys.path` and refusing to go on when a
module was imported from it; it writes a fresh trace file, and derives its exit status and a verdict file
from solbench's own verdicts only. A verdict file
already there is removed first, so a gate that dies leaves none for the CI step to read (docs/ci.md).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2
RUN_FUNCTION = re.compile(r"^def\s+run\s*\(|\brun\s*\([^;]*\)\s*\{", re.M)  # Python, or CUDA C++


@dataclass
class GateVerdict:
    """What the gate decided and why: the file a CI step checks (`"verdict": "pass"`)."""

    verdict: str  # "pass" or "fail"
    reasons: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # status -> workloads
    items: list[dict] = field(default_factory=list)  # one per (solution, workload)
    run_exit_code: int = 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "gate", help="CI gate for untrusted kernel PRs: pass/fail from solbench's own verdicts, no pytest",
        description="Evaluate solution files and pass only if every workload PASSED (SKIPPED too, unless "
                    "--require-gpu). Needs no pytest configuration and loads nothing from the tree under test "
                    "but the solution files, which run in sandboxed workers. Exit 0: pass; 1: fail; 2: bad input.")
    p.add_argument("solutions", nargs="+", type=Path, help="solution files or folders of them (the PR's)")
    p.add_argument("--problems", type=Path, required=True,
                   help="problem folder or dataset, from a trusted checkout (not the PR's tree)")
    p.add_argument("--verdict", type=Path,
                   help="write the verdict here (JSON; default .solbench/verdict.json); removed first")
    p.add_argument("--traces", type=Path, help="keep the traces here (a new file; default .solbench/gate-traces.jsonl, "
                                               "removed first)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto)")
    p.add_argument("--max-workloads", type=int, help="only the first N workloads of each problem")
    p.add_argument("--min-score", type=float, metavar="X", help="fail a workload whose SOL score is below X (0..1)")
    p.add_argument("--require-gpu", action="store_true", help="a SKIPPED workload fails the gate")
    p.add_argument("--no-strict", action="store_true", help="official tolerance rules only (as pytest --solbench)")
    p.add_argument("--quick", action="store_true", help="smoke-test timing (1 trial, 3 iterations)")
    p.set_defaults(func=gate_command)


def decide(traces: list, run_exit_code: int, *, min_score: float | None = None,
           require_gpu: bool = False) -> GateVerdict:
    """Pass only when the run itself succeeded, produced traces, and every trace is acceptable."""
    from solbench.spec.trace import Status  # as every sub-command: loaded when it runs, not for --help

    verdict = GateVerdict("pass", run_exit_code=run_exit_code)
    for trace in traces:
        status = trace.status
        verdict.counts[str(status)] = verdict.counts.get(str(status), 0) + 1
        score = (trace.evaluation.sol or {}).get("score") if trace.evaluation is not None else None
        verdict.items.append({"solution": trace.solution, "definition": trace.definition,
                              "workload": trace.workload_uuid, "status": str(status), "sol_score": score})
        where = f"{trace.solution} on {trace.definition} workload {trace.workload_uuid}"
        if status.failed or (require_gpu and status == Status.SKIPPED):
            verdict.reasons.append(f"{status}: {where}")
        elif min_score is not None and status == Status.PASSED and (score is None or score < min_score):
            verdict.reasons.append(f"SOL score {score if score is None else round(score, 3)} < {min_score}: {where}")
    if not traces:
        verdict.reasons.append("no workload was evaluated")
    if run_exit_code != 0 and not verdict.reasons:
        verdict.reasons.append(f"the run ended with exit code {run_exit_code}")
    if verdict.reasons:
        verdict.verdict = "fail"
    return verdict


def gated_files(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """(solution files, other files) under `paths`, by the rules `pytest --solbench` collects with
    (docs/ci.md): a PR's conftest.py, test_*.py or helper module is not graded, and never run here."""
    from solbench.orchestrator.jobs import solution_files  # loaded when the command runs
    from solbench.spec.solution import problem_named_in

    graded, other = [], []
    for path in solution_files(paths):
        text = path.read_text(errors="replace")
        helper = path.suffix != ".json" and problem_named_in(text) is None and not RUN_FUNCTION.search(text)
        not_a_solution = path.suffix == ".json" and '"sources"' not in text
        named_out = path.name.startswith(("test_", "conftest")) and path not in paths
        (other if helper or not_a_solution or named_out else graded).append(path)
    return graded, other


def run_arguments(args: argparse.Namespace, files: list[Path], traces: Path) -> list[str]:
    """The `solbench run` that the gate is (absolute paths: it runs in another folder)."""
    argv = ["run", str(args.problems.resolve()), "-o", str(traces.resolve()), "--device", args.device]
    for path in files:
        argv += ["--solution", str(path.resolve())]
    if args.max_workloads is not None:
        argv += ["--max-workloads", str(args.max_workloads)]
    if not args.no_strict:
        argv.append("--strict")
    if args.quick:
        argv += ["--trials", "1", "--iters", "3", "--no-adaptive", "--timing-rounds", "1"]
    return argv


def tree_of(solutions: list[Path]) -> list[Path]:
    """The folders of the tree under test: the paths given, and the working folder when they lie in it."""
    from solbench.gate.isolated import inside, resolved

    tree = [resolved(p) if p.is_dir() else resolved(p).parent for p in solutions]
    cwd = resolved(Path.cwd())
    return tree + ([cwd] if any(inside(path, [cwd]) for path in tree) else [])


def default_verdict_path() -> Path:
    """`.solbench/verdict.json` under the working folder; `.solbench/` git-ignores itself (as .pytest_cache)."""
    from solbench.report.workdir import (
        solbench_folder,  # the one place that makes .solbench/ and its .gitignore
    )

    return solbench_folder() / "verdict.json"


def gate_command(args: argparse.Namespace) -> int:
    from solbench.cli import EXIT_INTERRUPTED, stop_requested
    from solbench.gate.isolated import run_isolated, tree_modules
    from solbench.report.traces import read_traces
    from solbench.spec.errors import SpecError

    def bad(message: str) -> int:
        print(f"solbench gate: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT

    tree = tree_of(args.solutions)
    shadowing = tree_modules(tree)  # e.g. `python -m solbench` started in a tree that ships a module
    if shadowing:
        return bad(f"modules were imported from the tree under test: {', '.join(shadowing[:5])}; "
                   "start the gate from a folder outside the tree (docs/ci.md)")
    if args.verdict is None:
        args.verdict = default_verdict_path()
    if args.verdict.is_dir():
        return bad(f"--verdict {args.verdict} is a folder")
    args.verdict.unlink(missing_ok=True)  # an old (or planted) verdict never outlives a gate that fails to end
    if args.min_score is not None and not 0 <= args.min_score <= 1:
        return bad("--min-score must be between 0 and 1")
    if args.traces is not None and args.traces.exists():
        return bad(f"--traces {args.traces} exists: the gate writes a new file (no resume from earlier traces)")
    if args.traces is None:  # beside the verdict, so that the run's last line names a file that stays
        args.traces = default_verdict_path().with_name("gate-traces.jsonl")
        args.traces.unlink(missing_ok=True)  # as the verdict: an old (or planted) file is never resumed
    if not args.problems.is_dir():
        return bad(f"--problems {args.problems} is not a folder")
    try:
        files, other = gated_files(args.solutions)
    except SpecError as exc:
        return bad(str(exc))
    if not files:
        return bad(f"no solution files in {', '.join(map(str, args.solutions))}")
    if other:
        print(f"solbench gate: not graded (not solution files): {', '.join(map(str, other))}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="solbench-gate-") as scratch:
        # decided in a process the tree cannot configure, started in a folder outside it (gate/isolated.py)
        code = run_isolated("solbench", run_arguments(args, files, args.traces), tree, Path(scratch))
        traces = read_traces([args.traces]) if args.traces.exists() else []
    verdict = decide(traces, code, min_score=args.min_score, require_gpu=args.require_gpu)
    interrupted = stop_requested.is_set()  # Ctrl-C or SIGTERM: a fail verdict, then the signal's exit status
    if interrupted:
        verdict.verdict, verdict.reasons = "fail", ["interrupted", *verdict.reasons]
    args.verdict.write_text(json.dumps(asdict(verdict), indent=2) + "\n")
    summary = ", ".join(f"{n} {status}" for status, n in sorted(verdict.counts.items())) or "nothing evaluated"
    kept = f"verdict in {args.verdict}, " + (f"traces in {args.traces}" if args.traces.is_file() else "no traces kept")
    print(f"solbench gate: {verdict.verdict.upper()} ({summary}); {kept}", file=sys.stderr)
    for reason in verdict.reasons[:20]:
        print(f"  {reason}", file=sys.stderr)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_PASS if verdict.verdict == "pass" else (EXIT_BAD_INPUT if code == EXIT_BAD_INPUT else EXIT_FAIL)
