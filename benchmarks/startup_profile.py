"""Where a run's fixed start-up seconds go on a GPU machine (issue 18: what a short run cannot spread).

Three measurements, each alone and with every GPU's two workers starting at once (what `--devices` does):

- `stages`: a child process that goes through a worker's start-up in order (Python, torch, the rest of the
  harness, the guard, the CUDA context, the first cuBLAS GEMM in bf16 and fp32, the first softmax), printing
  the seconds since it was spawned at each stage;
- `worker`: real `WorkerProcess`es, spawn to the reply of their first request (`Environment`, which creates
  the CUDA context), the path a run's first workload waits on;
- `driver`: how long the driver takes to know its devices, through torch (import and CUDA's count) and
  through NVML, alone and beside the workers starting.

    python3 benchmarks/startup_profile.py [--gpus N] [--json OUT]

Nothing here changes the GPU's clocks, power or mode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STAGES = ("python", "torch", "harness", "languages", "cupti", "libcuda", "device", "nvml", "snapshot",
          "cuda_context", "gemm_bf16", "gemm_fp32", "softmax")


def child() -> None:
    """A worker's start-up (`worker.main.start_guard`'s steps, then CUDA's first uses), stage by stage;
    prints {stage: seconds since spawn} as JSON."""
    spawned = float(os.environ["PROFILE_SPAWNED"])
    marks = {"python": time.time() - spawned}

    def mark(stage: str) -> None:
        marks[stage] = time.time() - spawned

    import torch

    mark("torch")
    from solbench import languages
    from solbench.timing import timer
    from solbench.worker import guard as worker_guard
    from solbench.worker import main as worker_main  # every harness module a worker binds
    from solbench.worker.probe import load_cupti
    from solbench.worker.state import WorkerState
    from solbench.worker.transfer import bind_driver

    mark("harness")
    state = WorkerState("cuda:0")
    languages.known()
    mark("languages")
    load_cupti()
    mark("cupti")
    bind_driver(state)
    mark("libcuda")
    index = timer.resolve_device(state.device).index
    mark("device")
    timer.telemetry_for(index).read()
    mark("nvml")
    worker_guard.make_checker(worker_guard.take_snapshot({"HANDLERS": worker_main.HANDLERS}))
    mark("snapshot")
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    mark("cuda_context")
    for dtype, stage in ((torch.bfloat16, "gemm_bf16"), (torch.float32, "gemm_fp32")):
        a = torch.randn(256, 256, device="cuda", dtype=dtype)
        (a @ a).sum().item()
        mark(stage)
    torch.softmax(a, -1).sum().item()
    mark("softmax")
    print(json.dumps(marks))


def run_children(count: int, gpus: int) -> list[dict]:
    procs = []
    for i in range(count):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(i % gpus), "PROFILE_SPAWNED": repr(time.time()),
               "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        procs.append(subprocess.Popen([sys.executable, __file__, "--child"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        results.append(json.loads(lines[-1]) if lines else {"error": err[-300:]})
    return results


def summarise(results: list[dict]) -> str:
    good = [r for r in results if "error" not in r]
    if not good:
        return f"failed: {results[0].get('error')}"
    parts = []
    for stage in STAGES:
        values = [r[stage] for r in good if stage in r]
        parts.append(f"{stage} {statistics.median(values):.2f}/{max(values):.2f}")
    return " | ".join(parts) + (f"  ({len(results) - len(good)} failed)" if len(good) < len(results) else "")


def worker_ready(count: int, gpus: int) -> list[float]:
    """Seconds from spawning `count` real workers (spread over `gpus`) to each one's first reply."""
    from solbench.orchestrator.process import WorkerProcess
    from solbench.protocol import messages as msg

    workers = [WorkerProcess(f"cuda:{i % gpus}", role="reference" if i % 2 == 0 else "solution")
               for i in range(count)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    ready = [0.0] * count

    def wait(i: int) -> None:
        workers[i].request(msg.Environment(), 300)
        ready[i] = time.monotonic() - started

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for worker in workers:
        worker.kill()
    return ready


def driver_devices(way: str) -> float:
    """Seconds a fresh process takes to list the CUDA devices `way` ("torch" or "nvml")."""
    code = ("import time; t = time.monotonic(); "
            + ("import torch; n = torch.cuda.device_count()" if way == "torch" else
               "from solbench.timing.nvml import NvmlBoundary; b = NvmlBoundary(); b.init(); n = b.device_count()")
            + "; print(time.monotonic() - t, n)")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    return float(out.stdout.split()[0]) if out.returncode == 0 else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--gpus", type=int, default=None, help="GPUs to spread over (default: all)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.child:
        child()
        return 0
    from solbench.timing.nvml import NvmlBoundary

    nvml = NvmlBoundary()
    nvml.init()
    gpus = args.gpus or nvml.device_count()
    report: dict = {"gpus": gpus}
    print(f"{gpus} GPU(s); each cell: median/max seconds since spawn")
    for count in (1, 2 * gpus):
        report[f"stages_{count}"] = run_children(count, gpus)
        print(f"stages, {count:>2} at once: {summarise(report[f'stages_{count}'])}")
    for count in (1, 2 * gpus):
        ready = worker_ready(count, gpus)
        report[f"worker_{count}"] = ready
        print(f"worker ready (spawn -> first reply), {count:>2} at once: median {statistics.median(ready):.2f} s, "
              f"max {max(ready):.2f} s")
    for way in ("torch", "nvml"):
        alone = driver_devices(way)
        beside: list[float] = []

        def start_workers(into: list[float] = beside) -> None:
            into.append(max(worker_ready(2 * gpus, gpus)))

        spawned = threading.Thread(target=start_workers)
        spawned.start()
        time.sleep(0.05)
        with_workers = driver_devices(way)
        spawned.join()
        report[f"driver_{way}"] = {"alone_s": alone, "beside_workers_s": with_workers}
        print(f"driver lists devices by {way}: alone {alone:.2f} s, beside {2 * gpus} starting workers "
              f"{with_workers:.2f} s (those workers ready after {beside[0]:.2f} s)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
