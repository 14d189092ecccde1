"""What an agent waits for per verdict: one call per candidate, as a command, as `api.evaluate`, on
the workers an `api.Evaluator` keeps, and through a `solbench serve` (issue 35).

    python benchmarks/agent_loop.py                                   # the shipped rmsnorm problem, its solutions
    python benchmarks/agent_loop.py PROBLEM_DIR SOLUTION ... --rounds 3 --think-s 2 --max-workloads 2
    python benchmarks/agent_loop.py --device cpu --quick              # a smoke test without a GPU
    python benchmarks/agent_loop.py problem_defs/core/rmsnorm_h4096 --ways cli,serve --rounds 7 --max-workloads 4

Each round evaluates every candidate (the solutions given, then the problem's reference) once per way:
`cli` runs `python -m solbench run PROBLEM --solution S` (a new interpreter, its torch import and its
workers per call), `evaluate` calls `api.evaluate` in this process (new workers per call), `kept` calls
`Evaluator.evaluate` (workers started once, before the first call: that start-up is printed apart), `serve`
submits to a `solbench serve` started once for the benchmark (`api.Client.evaluate`: the problem sent by
content, the traces streamed back; its start-up is printed apart too).
`--think-s` sleeps between calls, as an agent writing its next candidate would. Prints each call's wall
time and statuses, then per way the median and total, each way's median against `cli`'s (issue 35's goal for
`serve`: at most 0.2x), and whether every verdict agreed with `cli`'s.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from solbench import api  # noqa: E402 - after the path above, so the checkout's package is the one timed
from solbench.serve.process import ServiceProcess  # noqa: E402

DEFAULT_PROBLEM = REPO / "problem_defs" / "core" / "rmsnorm_h4096"
WAYS = ("cli", "evaluate", "kept", "serve")


def candidates(problem: Path, given: list[str]) -> list[Path | None]:
    """The solutions to evaluate, then None (the problem's reference). By default the problem's shipped Python
    solutions: a CUDA C++ one is compiled again in each new process (its build is private to the process),
    which any new candidate pays whichever way it is evaluated."""
    paths = [Path(s) for s in given] or sorted((REPO / "solutions" / problem.name).glob("*.py"))
    return [*paths, None]


def options(args: argparse.Namespace) -> dict:
    chosen = {"device": args.device, "max_workloads": args.max_workloads}
    return {**chosen, "quick": True} if args.quick else chosen


def run_cli(problem: Path, solution: Path | None, args: argparse.Namespace) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="agent_loop_") as tmp:
        out = Path(tmp) / "traces.jsonl"
        command = [sys.executable, "-m", "solbench", "run", str(problem), "--device", args.device,
                   "--max-workloads", str(args.max_workloads), "-o", str(out)]
        command += ["--solution", str(solution)] if solution else []
        command += ["--trials", "1", "--warmup", "1", "--iters", "3", "--no-adaptive", "--timing-rounds", "1"] \
            if args.quick else []
        subprocess.run(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if not out.exists():
            return ["NO_TRACE"]
        return [json.loads(line)["evaluation"]["status"] for line in out.read_text().splitlines() if line.strip()]


def statuses(traces) -> list[str]:
    return [t.evaluation.status.value for t in traces]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problem", nargs="?", default=str(DEFAULT_PROBLEM))
    parser.add_argument("solutions", nargs="*")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--max-workloads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--think-s", type=float, default=0.0)
    parser.add_argument("--quick", action="store_true", help="smoke-test settings (1 trial, 3 timed calls)")
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--serve-args", default="", help="more `solbench serve` options for its runs, given "
                                                           "with an equals sign: --serve-args=--no-reuse-eager-reference")
    args = parser.parse_args()
    problem = Path(args.problem).resolve()
    if not (problem / "definition.json").is_file():
        raise SystemExit(f"{problem} is not a problem folder (no definition.json)")
    missing = [s for s in args.solutions if not Path(s).is_file()]
    if missing:
        raise SystemExit(f"solution files not found: {', '.join(missing)}")
    todo = candidates(problem, args.solutions) * args.rounds
    ways = [w for w in args.ways.split(",") if w in WAYS]
    rows, walls = [], {way: [] for way in ways}
    kept_start_s = serve_start_s = None
    evaluator = service = client = None
    try:
        if "kept" in ways:
            started = time.monotonic()
            evaluator = api.Evaluator(**options(args))
            kept_start_s = time.monotonic() - started
            print(f"kept: workers started in {kept_start_s:.2f} s")
        if "serve" in ways:
            started = time.monotonic()
            folder = tempfile.mkdtemp(prefix="agent_loop_serve_")
            service = ServiceProcess(folder, "--device", args.device, *shlex.split(args.serve_args), cwd=REPO)
            client = api.Client(service.url)
            serve_start_s = time.monotonic() - started
            print(f"serve: service up in {serve_start_s:.2f} s at {service.url}")
        print(f"{'candidate':28s} " + " ".join(f"{w + ' s':>10s} {w + ' statuses':24s}" for w in ways))
        for solution in todo:
            row = {"candidate": solution.name if solution else "reference"}
            for way in ways:
                time.sleep(args.think_s)
                started = time.monotonic()
                if way == "cli":
                    got = run_cli(problem, solution, args)
                elif way == "evaluate":
                    got = statuses(api.evaluate(problem, solution, **options(args)))
                elif way == "serve":
                    served = {k: v for k, v in options(args).items() if k != "device"}  # the service's
                    got = statuses(client.evaluate(problem, solution, **served))
                else:
                    got = statuses(evaluator.evaluate(problem, solution))
                walls[way].append(time.monotonic() - started)
                row[way] = {"s": round(walls[way][-1], 3), "statuses": got}
            rows.append(row)
            print(f"{row['candidate'][:28]:28s} "
                  + " ".join(f"{row[w]['s']:10.2f} {','.join(row[w]['statuses'])[:24]:24s}" for w in ways))
    finally:
        if evaluator is not None:
            evaluator.close()
        if service is not None:
            service.stop()
    print()
    start_up = {"kept": kept_start_s, "serve": serve_start_s}
    for way in ways:
        median = statistics.median(walls[way])
        ratio = f", {median / statistics.median(walls['cli']):.3f}x cli's" if "cli" in ways and way != "cli" else ""
        print(f"{way:9s} median {median:6.2f} s per call{ratio}, total {sum(walls[way]):7.2f} s"
              + (f" (+ {start_up[way]:.2f} s start-up once)" if start_up.get(way) is not None else ""))
    agree = all(len({tuple(r[w]["statuses"]) for w in ways}) == 1 for r in rows)
    print(f"every call's statuses equal across {', '.join(ways)}: {'yes' if agree else 'NO'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"kept_start_s": kept_start_s, "serve_start_s": serve_start_s,
                                               "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
