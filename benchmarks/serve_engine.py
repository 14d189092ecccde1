"""The `serve` engine of benchmarks/cluster_throughput.py (issue 35): the problems submitted all at once to a
`solbench serve` on N GPUs, their traces streamed back into one file.

The service is started once per GPU count (its start-up is reported apart, in the `ray_s` column, as the
`kept` engine's is) and judges the dataset `passes` times: the first pass is what a fresh service sees, later
passes are what a CI farm sees on the next PR (the problems judged before: the baselines' times reused).
With `kill_after`, one running solution worker is killed once that many traces are in; the service
re-queues its workload once, and the row's `dup` column and the kill check say whether any was lost or
reported twice.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

from solbench import api
from solbench.orchestrator.jobs import load_problems
from solbench.serve.process import ServiceProcess

STREAM_THREADS_MAX = 64


def kill_a_running_solution_worker(client: api.Client, written: list, after: int, log: list[str],
                                   done: threading.Event) -> None:
    """Once `after` traces are in, SIGKILL the solution worker of a lane that is running a submission."""
    while not done.is_set():
        if len(written) >= after:
            for device, lane in client.health()["lanes"].items():
                pid = lane["workers"]["solution"]
                if lane["running"] and pid:
                    os.kill(pid, signal.SIGKILL)
                    log.append(f"killed the solution worker {pid} on {device} after {len(written)} traces")
                    return
        time.sleep(0.1)


def judge_once(client: api.Client, problems: list, max_workloads: int, traces: Path, timeout_s: float,
               kill_after: int | None) -> dict:
    """Every problem submitted at once, each streamed back by a thread of its own; wall, traces, kills."""
    started = time.monotonic()
    ids = [client.submit(problem_path=str(p.directory), max_workloads=max_workloads) for p in problems]
    written: list[dict] = []
    lock = threading.Lock()
    done, kills = threading.Event(), []

    def stream(submission: str) -> None:
        for trace in client.stream(submission):
            with lock:
                written.append(trace.to_dict())
                with open(traces, "a") as out:
                    out.write(json.dumps(trace.to_dict()) + "\n")

    if kill_after:
        threading.Thread(target=kill_a_running_solution_worker, args=(client, written, kill_after, kills, done),
                         daemon=True).start()
    streams = [threading.Thread(target=stream, args=(i,), daemon=True) for i in ids]
    for thread in streams:
        thread.start()
    cut = False
    for thread in streams:
        thread.join(max(0.1, timeout_s - (time.monotonic() - started)))
        cut = cut or thread.is_alive()
    if cut:
        for submission in ids:
            client.cancel(submission)
    done.set()
    return {"wall_s": time.monotonic() - started, "lines": list(written), "cut": cut, "kills": kills,
            "attempts": [client.poll(i, since=10 ** 9)["attempts"] for i in ids]}


def run_serve(dataset: Path, gpus: int, device: str, max_workloads: int, traces: Path, timeout_s: float,
              kill_after: int | None = None, passes: int = 1, serve_args: tuple[str, ...] = ()) -> list[dict]:
    """One row per pass, in cluster_throughput's `run_once` shape (engine `serve`, then `serve#2`, ...)."""
    devices = [] if device == "cpu" else ["--devices", ",".join(str(i) for i in range(gpus))]
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    service = ServiceProcess(traces.with_suffix(".service"), "--device", device, *devices, *serve_args, env=env)
    up_s = time.monotonic() - started
    rows = []
    try:
        client = api.Client(service.url)
        problems = load_problems(dataset)
        for index in range(passes):
            path = traces if index == 0 else traces.with_name(f"{traces.stem}_pass{index + 1}.jsonl")
            left = timeout_s - (time.monotonic() - started)
            result = judge_once(client, problems, max_workloads, path, left / (passes - index),
                                kill_after if index == 0 else None)
            lines = result["lines"]
            keys = [(t["definition"], t["workload"]["uuid"]) for t in lines]
            rows.append({"engine": "serve" if index == 0 else f"serve#{index + 1}", "gpus": gpus,
                         "wall_s": round(result["wall_s"], 1), "workloads": len(lines), "cut": result["cut"],
                         "ray_s": round(up_s, 1), "timeline": {}, "rc": 0,
                         "busy_s": round(sum(t["evaluation"].get("seconds") or 0 for t in lines), 1),
                         "statuses": {f"{d}/{u}": t["evaluation"]["status"] for (d, u), t in zip(keys, lines)},
                         "duplicates": len(keys) - len(set(keys)), "kills": result["kills"],
                         "requeued": sum(a > 1 for a in result["attempts"]), "stderr_tail": ""})
    finally:
        code = service.stop()
        if rows and code not in (0, 130, 143, None):  # 130/143: stopped by its signal, cleanly
            rows[-1]["rc"] = code
            rows[-1]["stderr_tail"] = "".join(service.stderr)[-600:]
    return rows
