"""What the typed formats cost: a 4,000-line trace file read and written, and the protocol per operation.

Issue 34 asked to measure pydantic v2 against msgspec before choosing (docs/formats/README.md has the
figures and the choice). Rows:

- `solbench` : this checkout's models as the trace file reader and writer use them (`Trace.from_json`
  or, before it existed, `from_dict` after `json.loads`; `json.dumps` of `to_dict`); `--before DIR` adds the same row for another checkout (main's
  hand-written dataclasses: `git archive main | tar -x -C DIR`), run in a subprocess.
- `pydantic json`: the same models through pydantic's own JSON parser and writer (`validate_json` /
  `dump_json`; the writer keeps `json.dumps`, whose output other tools already read).
- `msgspec` : equivalent `msgspec.Struct` models of the trace (only here; needs `pip install msgspec`).
- protocol: one `call` request and one `time` reply (100 samples) through `protocol.codec` encode and
  decode, as the orchestrator and a worker do per operation (the framing's bytes aside).

    python3 benchmarks/formats_bench.py [--lines 4000] [--before /tmp/base]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = {"uuid": "w-0", "axes": {"num_tokens": 7}, "inputs": {"x": {"type": "random"}, "eps": {
    "type": "scalar", "value": 1e-6}}, "tolerance": {"max_atol": 0.01, "max_rtol": 0.01,
    "required_matched_ratio": 0.99, "max_error_cap": None, "allow_negative_inf": False}}
STATS = {"median_ms": 0.5, "mean_ms": 0.51, "min_ms": 0.49, "max_ms": 0.7, "stdev_ms": 0.01, "n": 200,
         "ci_low_ms": 0.495, "ci_high_ms": 0.505, "ci_level": 0.95, "iqr_ms": 0.02, "warmup": 10,
         "method": "cuda_events", "flags": []}
SOL = {"convention": "strict", "hw": "H100", "hw_measured": False, "method": "meta", "flops_matmul": {},
       "flops_matmul_total": 0.0, "flops_other": 16386.0, "flops": 16386.0, "bytes": 24576.0,
       "bytes_by_tensor": {"x": 8192.0, "y": 8192.0}, "t_sol_ms": 0.0003, "bound": "memory",
       "t_memory_ms": 0.0003, "t_tensor_ms": 0.0, "t_simt_ms": 0.00002, "intensity": 0.66,
       "t_min_possible_ms": 0.0001, "latency_ms": 0.5, "achieved_tflops": 0.03, "achieved_gbps": 49.0,
       "sol_fraction": 0.0006, "t_baseline_ms": 0.6, "score": 0.52, "log_score": 0.51, "unknown_ops": [],
       "notes": [], "baselines_ms": {"eager": 0.6, "compile": None}}


def trace_line(i: int, schema: str) -> str:
    """One PASSED trace as `solbench run` writes it on a GPU (a signature aside)."""
    evaluation = {
        "status": "PASSED", "timestamp": "2026-11-27T00:00:00+00:00", "log": "",
        "environment": {"device": "cuda", "hardware": "NVIDIA H100 80GB HBM3", "driver": "570.1", "cuda": "12.8",
                        "torch": "2.11.0", "triton": "3.6.0", "python": "3.12.3", "hostname": "box",
                        "clocks_start": {"sm_mhz": 1980}, "clocks_end": {"sm_mhz": 1755},
                        "sandbox": {"namespaces": "pid+mount", "landlock": "writes only below 2 folders"},
                        "libs": {"torch": "2.11.0", "triton": "3.6.0", "cuda": "12.8"}},
        "correctness": {"max_absolute_error": 0.001, "max_relative_error": 0.002, "matched_ratio": 1.0,
                        "has_nan": False, "has_inf": False, "trials": 3, "checked_timed_iterations": 6,
                        "output": "y", "message": None, "flags": [], "numerics": None},
        "performance": {"latency_ms": 0.5, "reference_latency_ms": 0.6, "speedup_factor": 1.2, "latency": STATS,
                        "reference_latency": STATS, "host_launch_ms": 0.004, "gpu_busy_ms": 0.49,
                        "kernel_sum_ms": 0.48},
        "sol": SOL, "warnings": [], "seconds": 2.5, "phases_s": {"load": 0.5, "trials": 0.3, "other": 0.1}}
    return json.dumps({"schema": schema, "definition": "rmsnorm_h4096", "workload": {**WORKLOAD, "uuid": f"w-{i}"},
                       "solution": "torch_rmsnorm", "solution_hash": "0123456789abcdef", "evaluation": evaluation},
                      separators=(",", ":"))


def best_of(fn, repeat: int = 5) -> float:
    """The fastest of `repeat` runs, in CPU seconds of this process (all of it single-threaded Python):
    the figure least moved by other jobs on a shared machine."""
    times = []
    for _ in range(repeat):
        started = time.process_time()
        fn()
        times.append(time.process_time() - started)
    return min(times)


def solbench_rows(path: Path, label: str) -> list[tuple[str, float, float]]:
    """(row, decode ms, encode ms) for the solbench found first on sys.path."""
    from solbench.spec.trace import Trace

    lines = path.read_text().splitlines()
    traces = [Trace.from_dict(json.loads(line)) for line in lines]
    if hasattr(Trace, "from_json"):  # as `report.traces.read_trace_lines` reads a line
        decode = best_of(lambda: [Trace.from_json(line) for line in lines])
    else:
        decode = best_of(lambda: [Trace.from_dict(json.loads(line)) for line in lines])
    encode = best_of(lambda: [json.dumps(t.to_dict(), allow_nan=False, separators=(",", ":")) for t in traces])
    rows = [(label, decode * 1e3, encode * 1e3)]
    try:
        from solbench.spec.model import adapter
    except ImportError:  # a checkout before the typed models
        return rows
    typed = adapter(Trace)
    decode = best_of(lambda: [typed.validate_json(line) for line in lines])
    encode = best_of(lambda: [typed.dump_json(t) for t in traces])
    return rows + [(f"{label}, pydantic json", decode * 1e3, encode * 1e3)]


def protocol_row(label: str) -> tuple[str, float, float]:
    """(row, request µs, reply µs): encode + decode of a `call` request and a `time` reply."""
    from solbench.protocol import codec
    from solbench.protocol import messages as msg
    from solbench.timing.config import TimingConfig

    workload = WORKLOAD
    try:
        from solbench.spec.workload import Workload
        if "Workload" in str(msg.Call.__annotations__.get("workload", "")):
            workload = Workload.from_dict(WORKLOAD)
    except ImportError:
        pass
    request = msg.Time(workload=workload, seeds=[1, 2, 3], config=TimingConfig.cpu())
    reply = msg.Timed(samples_ms=[0.5] * 100, warmup=10, wall_s=0.2, sampled=[[0, 0, 5, [1.0]]],
                      host_ms=[0.01] * 100, phases_s={"setup": 0.1, "loop": 0.2})
    n = 2000
    request_s = best_of(lambda: [codec.decode_request(codec.encode(request, 1)) for _ in range(n)])
    reply_s = best_of(lambda: [codec.decode_reply(request, codec.encode(reply, 1, "time"), 1) for _ in range(n)])
    return (label, request_s / n * 1e6, reply_s / n * 1e6)


def msgspec_models(msgspec):
    """The trace and the time request as msgspec Structs (the same fields as solbench's models): (trace, request)."""
    from typing import Any

    class Stats(msgspec.Struct):
        median_ms: float | None
        mean_ms: float | None
        min_ms: float | None
        max_ms: float | None
        stdev_ms: float | None
        n: int
        ci_low_ms: float | None = None
        ci_high_ms: float | None = None
        ci_level: float | None = None
        iqr_ms: float | None = None
        warmup: int = 0
        method: str = ""
        flags: list[str] = []

    class Perf(msgspec.Struct):
        latency_ms: float | None
        reference_latency_ms: float | None = None
        speedup_factor: float | None = None
        latency: Stats | None = None
        reference_latency: Stats | None = None
        host_launch_ms: float | None = None
        gpu_busy_ms: float | None = None
        kernel_sum_ms: float | None = None

    class Corr(msgspec.Struct):
        max_absolute_error: float | None = 0.0
        max_relative_error: float | None = 0.0
        matched_ratio: float = 1.0
        has_nan: bool = False
        has_inf: bool = False
        trials: int = 0
        checked_timed_iterations: int = 0
        output: str | None = None
        message: str | None = None
        flags: list[str] = []
        numerics: dict[str, dict[str, Any]] | None = None

    class Env(msgspec.Struct):
        device: str = "cpu"
        hardware: str = ""
        driver: str | None = None
        cuda: str | None = None
        torch: str | None = None
        triton: str | None = None
        python: str | None = None
        hostname: str | None = None
        clocks_start: dict[str, Any] | None = None
        clocks_end: dict[str, Any] | None = None
        sandbox: dict[str, Any] | None = None
        libs: dict[str, str | None] = {}

    class Source(msgspec.Struct):
        type: str
        value: float | int | bool | None = None

    class Tol(msgspec.Struct, frozen=True):
        max_atol: float = 0.01
        max_rtol: float = 0.01
        required_matched_ratio: float = 0.99
        max_error_cap: float | None = None
        allow_negative_inf: bool = False

    class Work(msgspec.Struct):
        uuid: str
        axes: dict[str, int] = {}
        inputs: dict[str, Source] = {}
        tolerance: Tol = Tol()

    class Eval(msgspec.Struct):
        status: str
        timestamp: str = ""
        log: str = ""
        environment: Env | None = None
        correctness: Corr | None = None
        performance: Perf | None = None
        sol: dict[str, Any] | None = None
        warnings: list[str] = []
        seconds: float | None = None
        phases_s: dict[str, float] = {}

    class MTrace(msgspec.Struct):
        definition: str
        workload: Work
        solution: str
        solution_hash: str
        evaluation: Eval
        schema: str = ""

    class Request(msgspec.Struct, forbid_unknown_fields=True):
        v: int
        op: str
        id: int | None
        workload: Work
        seeds: list[int]

    return MTrace, Request


def msgspec_rows(path: Path) -> list[tuple[str, float, float]]:
    try:
        import msgspec
    except ImportError:
        return [("msgspec (not installed)", float("nan"), float("nan"))]
    MTrace, Request = msgspec_models(msgspec)  # noqa: N806 - classes
    lines = [line.encode() for line in path.read_text().splitlines()]
    decoder, encoder = msgspec.json.Decoder(MTrace), msgspec.json.Encoder()
    traces = [decoder.decode(line) for line in lines]
    decode = best_of(lambda: [decoder.decode(line) for line in lines])
    encode = best_of(lambda: [encoder.encode(t) for t in traces])
    request = {"v": 1, "op": "time", "id": 1, "workload": WORKLOAD, "seeds": [1, 2, 3]}
    n = 2000
    request_s = best_of(lambda: [msgspec.to_builtins(msgspec.convert(request, Request)) for _ in range(n)])
    return [("msgspec", decode * 1e3, encode * 1e3), ("msgspec protocol (time request only)", request_s / n * 1e6,
                                                      float("nan"))]


def measure(path: Path, label: str) -> dict:
    return {"trace": solbench_rows(path, label), "protocol": protocol_row(label)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=4000)
    parser.add_argument("--before", help="another checkout to measure the same way (main's, say)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # internal: one checkout, JSON on stdout
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.measure), "before")))
        return 0
    from solbench.spec.trace_versions import TRACE_SCHEMA

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "traces.jsonl"
        path.write_text("".join(trace_line(i, TRACE_SCHEMA) + "\n" for i in range(args.lines)))
        old_path = Path(tmp) / "traces_v1.jsonl"
        old_path.write_text("".join(trace_line(i, "solbench.trace/1") + "\n" for i in range(args.lines)))
        results = [measure(path, "solbench (pydantic dataclasses)")]
        if args.before:
            env = {**os.environ, "PYTHONPATH": str(args.before) + os.pathsep + os.environ.get("PYTHONPATH", "")}
            out = subprocess.run([sys.executable, __file__, "--measure", str(old_path)], env=env, cwd=args.before,
                                 capture_output=True, text=True, check=True).stdout
            results.insert(0, json.loads(out))
        trace_rows = [row for r in results for row in r["trace"]] + msgspec_rows(path)
        print(f"trace file, {args.lines} lines            decode ms   encode ms")
        for name, decode, encode in trace_rows:
            print(f"  {name:<36} {decode:9.1f}   {encode:9.1f}")
        print("protocol codec, per op              request µs    reply µs")
        for r in results:
            name, request_us, reply_us = r["protocol"]
            print(f"  {name:<36} {request_us:9.1f}   {reply_us:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
