"""Same code, two workers: where does the solution-vs-reference gap of short calls come from?

    python benchmarks/experiments/worker_asymmetry.py PROBLEM_DIR [...] [--max-workloads 3] [--rounds 3]

Loads each problem's reference into both of a session's workers (the reference worker, and the
solution's worker as if it were a submitted solution), then times it in alternating blocks
(reference, solution, reference, ...) exactly as `solbench run` does, first with the escaped-work
probe after every block and then in the variants asked for (no probe; the two requested input sets instead of fresh ones). Prints each block's median, the host time to queue a
call, the launch hold and how many calls outlasted it, so a systematic gap can be traced to one
worker, one position in the order, or the probe.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dataclasses import replace  # noqa: E402

from solbench.inputs.seeds import derive_seed  # noqa: E402
from solbench.orchestrator.config import RunConfig  # noqa: E402
from solbench.orchestrator.session import DeviceSession  # noqa: E402
from solbench.orchestrator.trials import judge  # noqa: E402
from solbench.protocol import messages as msg  # noqa: E402
from solbench.spec.problem import load_problem  # noqa: E402
from solbench.spec.solution import reference_solution  # noqa: E402

VARIANTS = {"default": {}, "no_probe": {"probe": False}, "fixed_inputs": {"fresh_inputs_budget_s": 0.0},
            "settle": {"settle_ms": 1.0}, "fixed_settle": {"fresh_inputs_budget_s": 0.0, "settle_ms": 1.0},
            "no_settle": {"settle_ms": 0.0}, "checked": {"checked_outputs": 3}, "graphs": {"cuda_graphs": True}}
TIMER_KEYS = ("settle_ms", "cuda_graphs")


def block(session: DeviceSession, worker, wdata: dict, seeds: list[int], timing, variant: str) -> dict:
    fields = dict(VARIANTS[variant])
    timing = replace(timing, **{key: fields.pop(key) for key in TIMER_KEYS if key in fields})
    reply = session.ask(worker, msg.Time(workload=wdata, seeds=seeds, config=timing, checked_outputs=0, **fields), 600)
    host = reply.host_ms or [0.0]
    return {"median_us": statistics.median(reply.samples_ms) * 1e3, "n": len(reply.samples_ms),
            "host_us": statistics.median(host) * 1e3, "hold_us": (reply.hold_ms or 0.0) * 1e3,
            "exposed": reply.exposed, "sm_mhz": (reply.clocks_before or {}).get("sm_mhz"),
            "probe": (reply.probe or {}).get("cupti")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--max-workloads", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["default", "no_probe"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    config = RunConfig(device=args.device)
    timing = config.timing_config(args.device)
    rows = []
    for folder in args.problems:
        problem = load_problem(folder)
        reference = reference_solution(problem.definition)
        session = DeviceSession(args.device, config)
        try:
            session.load(session.reference, problem, reference)
            session.load(session.candidate, problem, reference)
            for workload in problem.workloads[: args.max_workloads]:
                wdata = workload.to_dict()
                seed = derive_seed(0, workload.uuid, "trial", 0)
                reply = session.ask(session.candidate, msg.Call(workload=wdata, seed=seed), 600)
                judge(session, wdata, seed, reply.outputs, config.timeout_s)
                seeds = [derive_seed(0, workload.uuid, "timed", s) for s in range(2)]
                for variant in args.variants:
                    first = len(rows)
                    for r in range(args.rounds):
                        for name, worker in (("reference", session.reference), ("solution", session.candidate)):
                            row = {"problem": problem.name, "axes": workload.axes, "variant": variant, "round": r,
                                   "worker": name, **block(session, worker, wdata, seeds, timing, variant)}
                            rows.append(row)
                    mine = rows[first:]
                    ref = [x["median_us"] for x in mine if x["worker"] == "reference"]
                    sol = [x["median_us"] for x in mine if x["worker"] == "solution"]
                    print(f"{problem.name[:28]:28} {json.dumps(workload.axes)[:34]:34} {variant:12} "
                          f"ref {' '.join(f'{v:7.2f}' for v in ref)} | sol {' '.join(f'{v:7.2f}' for v in sol)} "
                          f"| sol/ref {statistics.median(sol) / statistics.median(ref):.3f} "
                          f"host {statistics.median(x['host_us'] for x in mine):.0f}us "
                          f"hold {max(x['hold_us'] for x in mine):.0f}us exposed {sum(x['exposed'] for x in mine)} "
                          f"sm {sorted({x['sm_mhz'] for x in mine if x['sm_mhz']})}", flush=True)
        finally:
            session.close()
    if args.out:
        args.out.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
