"""Where a run's fixed start-up seconds go (issue 18: what a short run cannot spread; issue 49: the template).

On a CPU (`--device cpu`, the default without a GPU): the stages below up to the guard, and real workers
spawned (SOLBENCH_WORKER_START=spawn) and forked from the template (orchestrator/zygote.py), one and two at
once, with the CPU seconds they cost. On a GPU machine, three measurements, each alone and with every GPU's two
workers starting at once (what `--devices` does):

- `stages`: a child process that goes through a worker's start-up in order (Python, torch, the rest of the
  harness, the guard, the CUDA context, the first cuBLAS GEMM in bf16 and fp32, the first softmax), printing
  the seconds since it was spawned at each stage;
- `worker`: real `WorkerProcess`es, spawn to the reply of their first request (`Environment`, which creates
  the CUDA context), the path a run's first workload waits on;
- `driver`: how long the driver takes to know its devices, through torch (import and CUDA's count) and
  through NVML, alone and beside the workers starting.

    python3 benchmarks/startup_profile.py [--device cpu|cuda] [--gpus N] [--json OUT]

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
CPU_STAGES = ("python", "torch", "harness", "languages", "snapshot")


def child() -> None:
    """A worker's start-up (`worker.main.start_guard`'s steps, then CUDA's first uses), stage by stage;
    prints {stage: seconds since spawn} as JSON (the CPU stages only, with PROFILE_CPU set)."""
    spawned = float(os.environ["PROFILE_SPAWNED"])
    cpu = bool(os.environ.get("PROFILE_CPU"))
    marks = {"python": time.time() - spawned}

    def mark(stage: str) -> None:
        marks[stage] = time.time() - spawned

    import torch

    mark("torch")
    from solbench import languages
    from solbench.timing import timer
    from solbench.worker import guard as worker_guard
    from solbench.worker import main as worker_main  # every harness module a worker binds
    from solbench.worker.cupti_activity import load_cupti
    from solbench.worker.state import WorkerState
    from solbench.worker.transfer import bind_driver

    mark("harness")
    state = WorkerState("cpu" if cpu else "cuda:0")
    languages.known()
    mark("languages")
    if cpu:
        worker_guard.make_checker(worker_guard.take_snapshot({"HANDLERS": worker_main.HANDLERS}))
        mark("snapshot")
        marks["cpu_s"] = time.process_time()
        print(json.dumps(marks))
        return
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


def run_children(count: int, gpus: int, cpu: bool = False) -> list[dict]:
    procs = []
    for i in range(count):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "" if cpu else str(i % gpus), "PROFILE_SPAWNED": repr(time.time()),
               "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), "PROFILE_CPU": "1" if cpu else ""}
        procs.append(subprocess.Popen([sys.executable, __file__, "--child"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        results.append(json.loads(lines[-1]) if lines else {"error": err[-300:]})
    return results


def summarise(results: list[dict], stages: tuple[str, ...] = STAGES) -> str:
    good = [r for r in results if "error" not in r]
    if not good:
        return f"failed: {results[0].get('error')}"
    parts = []
    for stage in stages + (("cpu_s",) if "cpu_s" in good[0] else ()):
        values = [r[stage] for r in good if stage in r]
        parts.append(f"{stage} {statistics.median(values):.2f}/{max(values):.2f}")
    return " | ".join(parts) + (f"  ({len(results) - len(good)} failed)" if len(good) < len(results) else "")


def worker_ready(count: int, gpus: int, cpu: bool = False, cpu_out: list[float] | None = None) -> list[float]:
    """Seconds from starting `count` real workers (spread over `gpus`) to each one's first reply."""
    from solbench.orchestrator.process import WorkerProcess
    from solbench.protocol import messages as msg

    workers = [WorkerProcess("cpu" if cpu else f"cuda:{i % gpus}", role="reference" if i % 2 == 0 else "solution")
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
    if cpu_out is not None:
        cpu_out += [tree_cpu_s(worker.proc.pid) for worker in workers]
    for worker in workers:
        worker.kill()
    return ready


def own_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """CPU seconds a live process and its live descendants have spent (a forked worker is the template's
    child, not this process's: resource.RUSAGE_CHILDREN never sees it)."""
    from solbench.orchestrator.process_tree import descendants

    total = 0
    for each in [pid, *descendants(pid)]:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


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
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda where NVML sees a GPU")
    args = parser.parse_args()
    if args.child:
        child()
        return 0
    from solbench.timing.nvml import NvmlBoundary

    if args.device == "cpu" or (args.device is None and not gpu_count()):
        report = cpu_profile()
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
        return 0

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


def gpu_count() -> int:
    from solbench.timing.nvml import NvmlBoundary

    try:
        nvml = NvmlBoundary()
        nvml.init()
        return nvml.device_count()
    except Exception:  # noqa: BLE001 - no NVML, no driver: a CPU machine
        return 0


def cpu_profile() -> dict:
    """The CPU stages of a spawned worker's start, then real workers spawned and forked: seconds to the first
    reply and the CPU seconds each worker's process tree spent until then."""
    report: dict = {"load": os.getloadavg()}
    print(f"CPU; load {report['load'][0]:.2f}; each cell: median/max seconds since spawn (cpu_s: CPU seconds)")
    for count in (1, 2):
        report[f"stages_{count}"] = run_children(count, 0, cpu=True)
        print(f"stages, {count} at once: {summarise(report[f'stages_{count}'], CPU_STAGES)}")
    from solbench.orchestrator import zygote

    for way in ("spawn", "fork"):
        os.environ["SOLBENCH_WORKER_START"] = way
        for label, count in (("first", 1), ("next", 1), ("next", 2), ("next", 2)):
            cpu_s: list[float] = []
            ready = worker_ready(count, 0, cpu=True, cpu_out=cpu_s)
            report.setdefault(f"worker_{way}", []).append({"label": label, "ready_s": ready, "cpu_s": cpu_s})
            print(f"worker ready, {way:>5}, {label} ({count} at once): median {statistics.median(ready):.2f} s, "
                  f"max {max(ready):.2f} s; CPU per worker {statistics.median(cpu_s):.2f} s")
    templates = [t.process.pid for t in zygote._templates.values() if t.process is not None]
    report["template_cpu_s"] = [own_cpu_s(pid) for pid in templates]
    print(f"the template's own start-up (imports, once): {report['template_cpu_s']} CPU s")
    return report


if __name__ == "__main__":
    sys.exit(main())
