"""What an agent waits for per verdict (issue 49): twenty candidates of one problem judged as a cold
`solbench run` each, on an `api.Evaluator`'s kept workers, and through a `solbench serve`; the verdicts and
latencies compared with the cold runs', and where each way's time goes (a phase table from the traces).

    python benchmarks/agent_loop.py --device cuda                     # the GPU measurement (issue 49)
    python benchmarks/agent_loop.py --device cpu --quick              # a smoke test without a GPU
    python benchmarks/agent_loop.py PROBLEM_DIR SOLUTION ... --ways cli,serve --rounds 2

By default the candidates are benchmarks/agent_candidates.py's twenty for problem_defs/core/layernorm_fp32_h1024
(PyTorch and Triton; correct, wrong and slower variants). Each round judges every candidate once per way:
`cli` runs `python -m solbench run PROBLEM --solution S` (a new interpreter, its torch import and its workers
per call), `evaluate` calls `api.evaluate` in this process (new workers per call), `kept` calls
`Evaluator.evaluate` (workers started once, before the first call; that start-up is printed apart), `serve`
submits to a `solbench serve` started once (`api.Client.evaluate`; its start-up printed apart too).
`--think-s` sleeps between calls, as an agent writing its next candidate would.

Prints each call's seconds and statuses; per way the median seconds per verdict and its ratio to `cli`'s
(issue 49: `serve` at most 0.2x); whether every way's verdicts equal the cold runs'; the median ratio of each
way's latencies to the cold runs' over the workloads that passed both ways (issue 49: within +-3%); and the
phase table: per verdict, the seconds of each trace phase (`phases_s`) and what was spent outside workloads.
Exit status 1 when a verdict differs from the cold runs'.
"""

from __future__ import annotations

import argparse
import importlib.util
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
sys.path.insert(1, str(REPO / "benchmarks"))

from agent_candidates import write_candidates  # noqa: E402 - benchmarks/ is not a package
from throughput import PHASES, SHORT  # noqa: E402

from solbench import api  # noqa: E402 - after the path above, so the checkout's package is the one timed
from solbench.serve.process import ServiceProcess  # noqa: E402

DEFAULT_PROBLEM = REPO / "problem_defs" / "core" / "layernorm_fp32_h1024"
WAYS = ("cli", "evaluate", "kept", "serve")
QUICK_FLAGS = ["--trials", "1", "--warmup", "1", "--iters", "3", "--no-adaptive", "--timing-rounds", "1"]
LATENCY_BOUND = 0.03  # issue 49: the ways' latencies agree with the cold runs' within the repeatability bound


def candidates(problem: Path, given: list[str], folder: Path) -> list[Path | None]:
    """The solutions given, else the twenty of agent_candidates.py (for its problem) or the problem's shipped
    Python solutions; then None (the problem's reference)."""
    if given:
        return [*(Path(s) for s in given), None]
    if problem.name == "layernorm_fp32_h1024":
        return [*write_candidates(folder), None]
    return [*sorted((REPO / "solutions" / problem.name).glob("*.py")), None]


def options(args: argparse.Namespace) -> dict:
    chosen = {"device": args.device, "max_workloads": args.max_workloads}
    return {**chosen, "quick": True} if args.quick else chosen


def verdict_rows(traces: list[dict]) -> list[dict]:
    """Per workload, what the comparison and the phase table read from a trace (its dict form)."""
    rows = []
    for trace in traces:
        evaluation = trace["evaluation"]
        rows.append({"uuid": trace["workload"]["uuid"], "status": evaluation["status"],
                     "latency_ms": (evaluation.get("performance") or {}).get("latency_ms"),
                     "seconds": evaluation.get("seconds") or 0.0, "phases": evaluation.get("phases_s") or {},
                     "reused": sum("reused" in w for w in evaluation.get("warnings") or [])})
    return rows


def run_cli(problem: Path, solution: Path | None, args: argparse.Namespace) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="agent_loop_") as tmp:
        out = Path(tmp) / "traces.jsonl"
        command = [sys.executable, "-m", "solbench", "run", str(problem), "--device", args.device,
                   "--max-workloads", str(args.max_workloads), "-o", str(out)]
        command += (["--solution", str(solution)] if solution else []) + (QUICK_FLAGS if args.quick else [])
        subprocess.run(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if not out.exists():
            return [{"uuid": "", "status": "NO_TRACE", "latency_ms": None, "seconds": 0.0, "phases": {}, "reused": 0}]
        return verdict_rows([json.loads(line) for line in out.read_text().splitlines() if line.strip()])


class Ways:
    """The kept Evaluator and the service, started once (their start-ups timed apart), and one call per way."""

    def __init__(self, ways: list[str], args: argparse.Namespace, problem: Path):
        self.ways, self.args, self.problem = ways, args, problem
        self.evaluator = self.service = self.client = None
        self.start_up_s: dict[str, float] = {}
        if "kept" in ways:
            started = time.monotonic()
            self.evaluator = api.Evaluator(**options(args))
            self.start_up_s["kept"] = time.monotonic() - started
            print(f"kept: workers started in {self.start_up_s['kept']:.2f} s")
        if "serve" in ways:
            started = time.monotonic()
            folder = tempfile.mkdtemp(prefix="agent_loop_serve_")
            self.service = ServiceProcess(folder, "--device", args.device, *shlex.split(args.serve_args), cwd=REPO)
            self.client = api.Client(self.service.url)
            self.start_up_s["serve"] = time.monotonic() - started
            print(f"serve: service up in {self.start_up_s['serve']:.2f} s at {self.service.url}")

    def call(self, way: str, solution: Path | None) -> list[dict]:
        if way == "cli":
            return run_cli(self.problem, solution, self.args)
        if way == "evaluate":
            traces = api.evaluate(self.problem, solution, **options(self.args))
        elif way == "serve":
            served = {k: v for k, v in options(self.args).items() if k != "device"}  # the service's device
            traces = self.client.evaluate(self.problem, solution, **served)
        else:
            traces = self.evaluator.evaluate(self.problem, solution)
        return verdict_rows([t.to_dict() for t in traces])

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.close()
        if self.service is not None:
            self.service.stop()


def latency_ratios(rows: list[dict], way: str) -> list[float]:
    """Per workload that passed both in the cold run and this way: this way's latency over the cold run's."""
    ratios = []
    for row in rows:
        cold = {r["uuid"]: r for r in row["cli"]["traces"]}
        for mine in row[way]["traces"]:
            other = cold.get(mine["uuid"])
            if other and mine["latency_ms"] and other["latency_ms"] and mine["status"] == other["status"] == "PASSED":
                ratios.append(mine["latency_ms"] / other["latency_ms"])
    return ratios


def print_summary(rows: list[dict], ways: list[str], start_up_s: dict[str, float]) -> bool:
    """Seconds per verdict per way, verdicts and latencies against the cold runs'; whether the verdicts agree."""
    medians = {w: statistics.median(r[w]["s"] for r in rows) for w in ways}
    for way in ways:
        ratio = f", {medians[way] / medians['cli']:.3f}x cli's" if "cli" in ways and way != "cli" else ""
        total = sum(r[way]["s"] for r in rows)
        print(f"{way:9s} median {medians[way]:6.2f} s per verdict{ratio}, total {total:7.2f} s"
              + (f" (+ {start_up_s[way]:.2f} s start-up once)" if way in start_up_s else ""))
    if "cli" not in ways:
        return True
    agree = True
    for way in [w for w in ways if w != "cli"]:
        differ = [r["candidate"] for r in rows if r[way]["statuses"] != r["cli"]["statuses"]]
        agree = agree and not differ
        ratios = latency_ratios(rows, way)
        verdicts = "every verdict equal to the cold runs'" if not differ else f"verdicts DIFFER for {', '.join(differ)}"
        if ratios:
            median = statistics.median(ratios)
            inside = "within" if abs(median - 1) <= LATENCY_BOUND else "OUTSIDE"
            latency = (f"latency / cold run's: median {median:.3f} over {len(ratios)} workloads ({inside} "
                       f"+-{LATENCY_BOUND:.0%}), range {min(ratios):.2f}-{max(ratios):.2f}")
        else:
            latency = "no workload passed both ways"
        print(f"{way:9s} {verdicts}; {latency}")
    return agree


def print_phase_table(rows: list[dict], ways: list[str]) -> None:
    """Per verdict (mean over the calls), the seconds of each trace phase, summed over the call's workloads;
    `outside` is the call's wall time that no workload's `seconds` covers (start-up, job building, HTTP)."""
    calls = len(rows)
    per_way = {}
    for way in ways:
        sums: dict[str, float] = {}
        for row in rows:
            for trace in row[way]["traces"]:
                for phase, seconds in trace["phases"].items():
                    sums[phase] = sums.get(phase, 0.0) + seconds
        inside = sum(t["seconds"] for r in rows for t in r[way]["traces"])
        sums["outside"] = max(0.0, sum(r[way]["s"] for r in rows) - inside)
        per_way[way] = {k: v / calls for k, v in sums.items()}
    names = [p for p in (*PHASES, "gpu_timed", "outside") if any(per_way[w].get(p, 0.0) >= 0.0005 for w in ways)]
    print("\nwhere a verdict's seconds go (mean per call, summed over its workloads; gpu_timed: the timed calls "
          "themselves, a part of timing.loop)")
    print(f"{'phase':12s} " + " ".join(f"{w:>9s}" for w in ways))
    for name in names:
        print(f"{SHORT.get(name, name):12s} " + " ".join(f"{per_way[w].get(name, 0.0):9.3f}" for w in ways))
    print(f"{'wall':12s} " + " ".join(f"{statistics.mean(r[w]['s'] for r in rows):9.3f}" for w in ways))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problem", nargs="?", default=str(DEFAULT_PROBLEM))
    parser.add_argument("solutions", nargs="*")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--max-workloads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--think-s", type=float, default=0.0)
    parser.add_argument("--quick", action="store_true", help="smoke-test settings (1 trial, 3 timed calls)")
    parser.add_argument("--ways", default="cli,kept,serve", help=f"some of {','.join(WAYS)}")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--serve-args", default="", help="more `solbench serve` options for its runs, given "
                                                           "with an equals sign: --serve-args=--no-reuse-eager-reference")
    args = parser.parse_args()
    if not (Path(args.problem) / "definition.json").is_file():
        raise SystemExit(f"{args.problem} is not a problem folder (no definition.json)")
    missing = [s for s in args.solutions if not Path(s).is_file()]
    if missing:
        raise SystemExit(f"solution files not found: {', '.join(missing)}")
    args.ways = [w for w in args.ways.split(",") if w in WAYS]
    if not args.ways:
        raise SystemExit(f"--ways: name some of {','.join(WAYS)}")
    if "serve" in args.ways and importlib.util.find_spec("aiohttp") is None:
        raise SystemExit("--ways serve needs aiohttp (solbench[serve]); on the GPU machine carry its wheels in .whl/ "
                         "(benchmarks/README.md), or leave serve out of --ways")
    return args


def main() -> int:
    args = parse_args()
    problem = Path(args.problem).resolve()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="agent_candidates_") as folder:
        todo = candidates(problem, args.solutions, Path(folder)) * args.rounds
        ways = Ways(args.ways, args, problem)
        try:
            print(f"{'candidate':28s} " + " ".join(f"{w + ' s':>8s} {w + ' statuses':24s}" for w in args.ways))
            for solution in todo:
                row = {"candidate": solution.stem if solution else "reference"}
                for way in args.ways:
                    time.sleep(args.think_s)
                    started = time.monotonic()
                    traces = ways.call(way, solution)
                    row[way] = {"s": round(time.monotonic() - started, 3), "traces": traces,
                                "statuses": [t["status"] for t in traces]}
                rows.append(row)
                print(f"{row['candidate'][:28]:28s} " + " ".join(
                    f"{row[w]['s']:8.2f} {','.join(row[w]['statuses'])[:24]:24s}" for w in args.ways), flush=True)
        finally:
            ways.close()
    print()
    agree = print_summary(rows, args.ways, ways.start_up_s)
    print_phase_table(rows, args.ways)
    if args.json:
        Path(args.json).write_text(json.dumps({"start_up_s": ways.start_up_s, "rows": rows}, indent=1))
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
