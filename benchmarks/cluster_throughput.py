"""The same problems through local `--devices` and through a Ray cluster, on 1..N GPUs (issues 17 and 18).

    python benchmarks/cluster_throughput.py DATASET --pick 40 --gpus 1,2,4 --engines local,ray
    python benchmarks/cluster_throughput.py DATASET --pick 10 --gpus 1 --engines ray,local
    python benchmarks/cluster_throughput.py DATASET --pick 20 --gpus 2 --engines ray --kill-after 6
    python benchmarks/cluster_throughput.py problem_defs --device cpu --gpus 1,2 --engines ray   (CPU slots)
    python benchmarks/cluster_throughput.py DATASET --pick 40 --gpus 1,2,4 --engines serve --kill-after 10

Each (engine, GPU count) is one `solbench run` of a copy of the problems, with the defaults and the first
`--max-workloads` workloads: `local` spreads over `--devices 0..n-1`, `ray` starts a local Ray cluster
(`--cluster auto --cluster-actors n`). Printed per run: wall time, workloads, workloads/min, speed-up
(workloads/min) against the same engine on the fewest GPUs, idle GPU seconds (n x wall minus the harness seconds of
every trace: start-up, tails and imbalance) and whether every status equals the first run's. With
`--kill-after K`, the Ray run's session actors are found among this run's own processes and one is
killed once K traces are on disk; the check is that every workload is reported exactly once.
`--budget-s` caps the whole script: a run cut by it is reported as cut, with what it finished.
Under each row, the run's timeline (`solbench run --timeline`): the seconds from one stage of the driver
to the next (interpreter start to the CLI, devices known, jobs built, first worker spawned, first and last
trace, workers closed, report printed, exit) and `after_exit`, the interpreter's own exit (wall minus exit).

`kept` runs the problems on an `api.Evaluator` over the GPUs (workers kept between calls): it is made, given
8 s to come up, and then runs the dataset; its wall is that run alone, its `ray_s` the Evaluator's start-up (not
in the wall), which is what a run on workers kept from an earlier call pays. Options after `--` are not passed to it.

`serve` (benchmarks/serve_engine.py, issue 35) starts a `solbench serve` on the GPUs and submits every problem
to it at once; its `ray_s` is the service's start-up (not in the wall). `--serve-passes 2` judges the dataset
again on the same service (row `serve#2`: the problems seen before, the baselines' times reused), and
`--kill-after K` kills a running solution worker once K traces are in (the service re-queues its workload).
Options after `--` are not passed to it.

`ray_s` is the Ray start-up (or connection) inside each Ray run, as the run reports it. By default every Ray
run starts its own local Ray (`--cluster auto` finds none), so its wall time includes that start-up. A real
cluster is started once, not per run: `--ray-head` starts one head (`ray start --head`, timed and printed
once) before the runs and ends it after, and every Ray run connects to it with `--cluster auto`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from serve_engine import run_serve  # noqa: E402 - beside this script

from solbench.orchestrator.jobs import load_problems  # noqa: E402 - the repository's copy, above
from solbench.orchestrator.sizes import declared_set_bytes  # noqa: E402
from solbench.orchestrator.timeline import parse_line  # noqa: E402

ACTOR_TITLE = "ray::SessionHost"  # how Ray names an actor's process (its command line)
RAY_STARTUP = re.compile(r"Ray (?:started|connected) in ([0-9.]+) s")  # the line `solbench run --cluster` prints
KEPT_LINES = re.compile(r"kept workers started in ([0-9.]+) s; run ([0-9.]+) s")
# The `kept` engine: an `api.Evaluator` over the GPUs, given KEPT_SETTLE_S to come up (as workers kept by an
# earlier call, or started before the run, would have), then one run of the dataset on it; its wall is the run's.
KEPT_SETTLE_S = 8.0
KEPT_RUN = """
import sys, time
from solbench import api
dataset, traces, max_workloads, device, gpus, settle_s = sys.argv[1:7]
started = time.monotonic()
devices = None if device == "cpu" else list(range(int(gpus)))
with api.Evaluator(device=device, devices=devices, max_workloads=int(max_workloads)) as evaluator:
    ready_s = time.monotonic() - started
    time.sleep(float(settle_s))
    begun = time.monotonic()
    evaluator.run_dataset(dataset, traces_path=traces)
    run_s = time.monotonic() - begun
print(f"kept workers started in {ready_s:.1f} s; run {run_s:.1f} s", file=sys.stderr)
"""


def pick_problems(root: Path, count: int | None, max_set_mib: float, max_workloads: int) -> list[Path]:
    """`count` problems spread evenly over the dataset (by category and name) among those whose first
    workloads draw every input at random (no blobs), have no FP4 tensors (Hopper cannot run their
    references) and whose largest input+output set is at most `max_set_mib`."""
    problems = sorted(load_problems(root), key=lambda p: (p.directory.parent.name, p.directory.name))
    eligible = []
    for problem in problems:
        workloads = problem.workloads[:max_workloads]
        kinds = {w.source_of(n).kind for w in workloads for n in problem.definition.inputs}
        dtypes = {t.dtype for t in {**problem.definition.inputs, **problem.definition.outputs}.values()}
        biggest = max(declared_set_bytes(problem, w, "inputs") + declared_set_bytes(problem, w, "outputs")
                      for w in workloads)
        if kinds <= {"random", "scalar"} and not any("fp4" in d for d in dtypes) and biggest <= max_set_mib * 2**20:
            eligible.append(problem.directory)
    if count is None or count >= len(eligible):
        return eligible
    return [eligible[i * len(eligible) // count] for i in range(count)]


def descendants(pid: int) -> list[int]:
    """Every process started, directly or not, by `pid` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def session_actors(pid: int) -> list[int]:
    actors = []
    for child in descendants(pid):
        try:
            title = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith(ACTOR_TITLE):
            actors.append(child)
    return actors


def count_lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip()) if path.exists() else 0


def killer(proc: subprocess.Popen, traces: Path, after: int, log: list[str]) -> None:
    """Kill one session actor of this run once `after` traces are on disk."""
    while proc.poll() is None:
        if count_lines(traces) >= after:
            actors = session_actors(proc.pid)
            if actors:
                os.kill(actors[0], signal.SIGKILL)
                log.append(f"killed actor pid {actors[0]} after {count_lines(traces)} traces")
                return
        time.sleep(0.2)


def start_ray_head(args, gpus: int) -> tuple[subprocess.Popen, str, float]:
    """A Ray head on this machine, in its own process group and temp folder (so `--cluster auto` of other
    Ray users here does not find it): (the blocking `ray start` process, its address, seconds to start)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="sbray")  # short: Ray's socket paths live under it
    command = [sys.executable, "-c", "from ray.scripts.scripts import main; main()", "start", "--head", "--block",
               f"--port={port}", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}",
               "--node-ip-address=127.0.0.1"]
    if args.device == "cpu":
        command += [f"--num-cpus={gpus}", "--num-gpus=0"]
    if "RAY_AUTH_MODE" not in os.environ and (Path.home() / ".ray" / "auth_token").is_file():
        os.environ["RAY_AUTH_MODE"] = "token"  # the runs' ray.init uses that token: the head must ask for it too
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    for line in proc.stdout:  # `ray start --block` says so once the head is up, then blocks
        if "Ray runtime started" in line:
            break
    else:
        raise SystemExit(f"ray start --head failed (exit {proc.wait()})")
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep its pipe drained
    proc.temp_dir = temp
    return proc, f"127.0.0.1:{port}", time.monotonic() - started


def stop_ray_head(proc: subprocess.Popen) -> None:
    """End the head this script started: its whole process group, and nothing else."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=15)
            time.sleep(1)  # its children (GCS, raylet) end with it; give them a moment before the check
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # any member of the group still there
    except ProcessLookupError:
        pass
    shutil.rmtree(proc.temp_dir, ignore_errors=True)


def run_once(dataset: Path, engine: str, gpus: int, args, traces: Path, timeout_s: float) -> dict:
    command = [sys.executable, "-m", "solbench", "run", str(dataset), "--max-workloads", str(args.max_workloads),
               "--device", args.device, "-o", str(traces), "--timeline", *args.extra]
    if engine == "kept":
        command = [sys.executable, "-c", KEPT_RUN, str(dataset), str(traces), str(args.max_workloads), args.device,
                   str(gpus), str(KEPT_SETTLE_S)]
    elif engine == "ray":
        command += ["--cluster", "auto", "--cluster-actors", str(gpus)]
    elif args.device != "cpu":
        command += ["--devices", ",".join(str(i) for i in range(gpus))]
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if args.sol_cache == "cold":
        env["SOLBENCH_SOL_CACHE"] = str(traces.with_suffix(".sol_cache"))  # empty: this run's own
    if engine == "ray" and args.ray_address:
        env["RAY_ADDRESS"] = args.ray_address  # what `--cluster auto` connects to first
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    kills: list[str] = []
    if engine == "ray" and args.kill_after:
        threading.Thread(target=killer, args=(proc, traces, args.kill_after, kills), daemon=True).start()
    cut = False
    try:
        _, err = proc.communicate(timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        cut = True
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the run keeps what finished
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
    wall = time.monotonic() - started
    lines = [json.loads(line) for line in traces.read_text().splitlines() if line.strip()] if traces.exists() else []
    keys = [(t["definition"], t["workload"]["uuid"]) for t in lines]
    startup, kept = RAY_STARTUP.search(err or ""), KEPT_LINES.search(err or "")
    if kept:  # the run alone: the workers' start-up is reported in the ray_s column
        startup, wall = kept, float(kept.group(2))
    return {"engine": engine, "gpus": gpus, "wall_s": round(wall, 1), "workloads": len(lines), "cut": cut,
            "ray_s": float(startup.group(1)) if startup else None, "timeline": parse_line(err or ""),
            "rc": proc.returncode, "busy_s": round(sum(t["evaluation"].get("seconds") or 0 for t in lines), 1),
            "statuses": {f"{d}/{u}": t["evaluation"]["status"] for (d, u), t in zip(keys, lines)},
            "duplicates": len(keys) - len(set(keys)), "kills": kills, "stderr_tail": (err or "")[-600:]}


def row(result: dict, first: dict, fewest: dict | None) -> str:
    wall, n = result["wall_s"], result["workloads"]
    ray_s = f"{result['ray_s']:.1f}" if result.get("ray_s") is not None else "-"
    per_min = 60 * n / wall if wall else 0.0
    idle = result["gpus"] * wall - result["busy_s"]
    fewest_per_min = 60 * fewest["workloads"] / fewest["wall_s"] if fewest and fewest["wall_s"] else 0.0
    speedup = per_min / fewest_per_min if fewest_per_min else 0.0  # throughput ratio: a cut run counts too
    same = [k for k in first["statuses"] if k in result["statuses"]]
    equal = all(result["statuses"][k] == first["statuses"][k] for k in same)
    equal_text = ("yes" if equal and len(same) == len(first["statuses"]) == n else
                  f"{'yes' if equal else 'NO'} ({len(same)}/{len(first['statuses'])} compared)")
    return (f"{result['engine']:<6} {result['gpus']:>4} {wall:>8.1f} {n:>9} {per_min:>8.1f} {speedup:>7.2f}x "
            f"{idle:>8.1f} {ray_s:>6} {equal_text:<14} {result['duplicates']:>4} {'CUT' if result['cut'] else ''}"
            f"{' rc=' + str(result['rc']) if result['rc'] not in (0, 1) and not result['cut'] else ''}")


def stage_line(result: dict) -> str | None:
    """The run's stages as seconds since the previous one (the first: since the process started)."""
    stages = result.get("timeline")
    if not stages:
        return None
    parts, previous = [], 0.0
    for stage, at in stages.items():
        parts.append(f"{stage} +{at - previous:.2f}")
        previous = at
    if "exit" in stages:
        parts.append(f"after_exit +{max(0.0, result['wall_s'] - stages['exit']):.2f}")
    return "timeline: " + " | ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--pick", type=int, help="this many problems spread over the dataset (default: all eligible)")
    parser.add_argument("--max-set-mib", type=float, default=128.0, help="largest input+output set of a picked problem")
    parser.add_argument("--every-problem", action="store_true", help="every problem under DATASET, none filtered out "
                                                                      "(custom inputs, large sets: issue 15's ten)")
    parser.add_argument("--max-workloads", type=int, default=2)
    parser.add_argument("--gpus", default="1,2,4", help="GPU (or CPU slot) counts, comma-separated")
    parser.add_argument("--engines", default="local,ray", help="local, ray, kept, serve, in the order they run")
    parser.add_argument("--serve-passes", type=int, default=1, help="serve: judge the dataset this many times on "
                                                                     "one service (later passes: rows serve#N)")
    parser.add_argument("--serve-args", default="", help="more `solbench serve` options for its runs, given "
                                                           "with an equals sign: --serve-args=--no-reuse-eager-reference")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--kill-after", type=int, help="ray runs: kill one session actor once this many traces exist; "
                                                        "serve runs: one running solution worker")
    parser.add_argument("--budget-s", type=float, default=540.0, help="for the whole script")
    parser.add_argument("--ray-head", action="store_true", help="start one Ray head before the runs (timed) and "
                                                                 "connect every Ray run to it, as on a real cluster")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument("--keep-traces", type=Path, help="copy each run's traces (ENGINE_GPUS.jsonl) into this folder, "
                                                          "e.g. to compare phases_s between GPU counts")
    parser.add_argument("--sol-cache", choices=("cold", "shared"), default="cold",
                        help="cold (default): every run starts with an empty speed-of-light cache of its own, so each "
                             "does the same analysis work; shared: the user's cache, which the first run fills for the "
                             "later ones (their walls then leave the analysis out)")
    parser.add_argument("--compare-to", type=Path, help="a --json file of an earlier invocation: statuses are "
                                                           "compared with its first run instead of this one's")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.extra = argv[cut + 1:]  # more `solbench run` options, after --
    deadline = time.monotonic() + args.budget_s
    problems = ([p.directory for p in load_problems(args.dataset)] if args.every_problem
                else pick_problems(args.dataset, args.pick, args.max_set_mib, args.max_workloads))
    print(f"{len(problems)} problems, first {args.max_workloads} workloads each: "
          + " ".join(f"{p.parent.name}/{p.name}" for p in problems), flush=True)
    header = f"{'engine':<6} {'gpus':>4} {'wall_s':>8} {'workloads':>9} {'wl/min':>8} {'speedup':>8} {'idle_s':>8} " \
             f"{'ray_s':>6} {'statuses=1st':<14} {'dup':>4}"
    print(header, flush=True)
    first = json.loads(args.compare_to.read_text())[0] if args.compare_to and args.compare_to.is_file() else None
    if first:
        print(f"statuses compared with {first['engine']} on {first['gpus']} from {args.compare_to}")
    args.ray_address, head = None, None
    if args.ray_head and "ray" in args.engines.split(","):
        head, args.ray_address, head_s = start_ray_head(args, max(int(g) for g in args.gpus.split(",")))
        print(f"Ray head started in {head_s:.1f} s at {args.ray_address}; every Ray run connects to it", flush=True)
    try:
        run_all(args, problems, first, deadline)
    finally:
        if head is not None:
            stop_ray_head(head)
    return 0


def run_all(args, problems: list[Path], first: dict | None, deadline: float) -> None:
    """Every (engine, GPU count) run on copies of the problems, one table row each."""
    expected = sum(min(args.max_workloads, count_lines(p / "workload.jsonl")) for p in problems)
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="solbench_cluster_bench_") as tmp:
        dataset = Path(tmp) / "dataset"
        for folder in problems:  # copies: problem discovery does not follow links
            shutil.copytree(folder, dataset / folder.parent.name / folder.name)
        plan = [(engine, int(g)) for engine in args.engines.split(",") for g in args.gpus.split(",")]
        for index, (engine, gpus) in enumerate(plan):
            left = deadline - time.monotonic()
            if left < 20:
                print(f"{engine} on {gpus}: not run, the time box is spent", flush=True)
                continue
            # The time left, shared by the runs still to come in proportion to 1/GPUs (their expected walls).
            share = left * (1 / gpus) / sum(1 / g for _, g in plan[index:])
            traces = Path(tmp) / f"{engine}_{gpus}.jsonl"
            if engine == "serve":
                fresh = run_serve(dataset, gpus, args.device, args.max_workloads, traces, share - 2, args.kill_after,
                                  args.serve_passes, tuple(shlex.split(args.serve_args)))
            else:
                fresh = [run_once(dataset, engine, gpus, args, traces, share - 2)]
            if args.keep_traces and traces.exists():
                args.keep_traces.mkdir(parents=True, exist_ok=True)
                shutil.copy(traces, args.keep_traces / traces.name)
            for result in fresh:
                results.append(result)
                report(result, first or results[0], next(r for r in results if r["engine"] == result["engine"]))
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))
    if args.kill_after:
        for r in results:
            requeued = f", {r['requeued']} submission(s) re-queued" if "requeued" in r else ""
            print(f"kill check ({r['engine']} {r['gpus']}): {r['workloads']} traces, {r['duplicates']} duplicated, "
                  f"{'none lost' if len(r['statuses']) == expected else f'INCOMPLETE ({expected} expected)'}{requeued}")


def report(result: dict, first: dict, fewest: dict) -> None:
    """One run's table row, its stages, its kills and, for a run that failed or was cut, its stderr's end."""
    print(row(result, first, fewest), flush=True)
    stages = stage_line(result)
    if stages:
        print(f"       {stages}", flush=True)
    for note in result["kills"]:
        print(f"       {note}", flush=True)
    if result["rc"] not in (0, 1) or result["cut"]:
        print("       stderr: " + result["stderr_tail"].strip().replace("\n", "\n       "))


if __name__ == "__main__":
    sys.exit(main())
