"""How long `solbench extract` takes per model (trace + draft, and validation on CPU), and end to end.

    python benchmarks/extract_speed.py                                  # Qwen/Qwen3-8B, in this process
    python benchmarks/extract_speed.py --model Qwen/Qwen3 --json out.json   # a family: every known size
    python benchmarks/extract_speed.py --all
    python benchmarks/extract_speed.py --cli --model Qwen/Qwen3         # `python -m solbench extract` as typed
    python benchmarks/extract_speed.py --cli --root ../old-checkout ... # the same command of another checkout

Targets on a 2-core machine, validation included: under 15 s per model, and the whole Qwen3 family (the
CLI, offline, imports included) under 60 s. Wall time depends on what else the machine runs, so the
CPU time (this process's, or the child's in --cli mode) and the load average are reported beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PER_MODEL_TARGET_S = 15.0
FAMILY_TARGET_S = 60.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[], help="model id or family name (repeatable)")
    parser.add_argument("--all", action="store_true", help="every shipped model")
    parser.add_argument("--no-validate", action="store_true")
    parser.add_argument("--cli", action="store_true",
                        help="time `python -m solbench extract` in a child process (hub probe, imports, writing)")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose CLI --cli runs (default: this one)")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args = parser.parse_args(argv)
    if args.cli:
        return _time_cli(args)
    return _time_in_process(args)


def _time_cli(args: argparse.Namespace) -> int:
    models = ["--all"] if args.all else [a for m in (args.model or ["Qwen/Qwen3-8B"]) for a in ("--model", m)]
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "solbench", "extract", *models, "-o", f"{out}/defs",
                   "--references", f"{out}/refs", *(["--no-validate"] if args.no_validate else [])]
        env = dict(os.environ, PYTHONPATH=str(args.root.resolve()) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        load_before = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, cwd=args.root, env=env)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    offline = os.environ.get("HF_HUB_OFFLINE", "")
    print(f"\n{' '.join(command[1:4] + models)}  (checkout {args.root}, HF_HUB_OFFLINE={offline!r}, "
          f"{os.cpu_count()} CPUs)")
    print(f"exit {done.returncode}, wall {wall:.1f} s, child CPU {cpu:.1f} s, load average {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after; target {FAMILY_TARGET_S:.0f} s for a family")
    if args.json:
        args.json.write_text(json.dumps({"command": command[1:], "root": str(args.root), "exit": done.returncode,
                                         "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                                         "load_average": [load_before, os.getloadavg()[0]]}, indent=2) + "\n")
    return done.returncode


def _time_in_process(args: argparse.Namespace) -> int:
    t0, c0 = time.perf_counter(), time.process_time()
    import torch  # imported here so that their cost is measured
    import transformers

    from solbench.extract import configs
    from solbench.extract.pipeline import extract_model
    import_s = time.perf_counter() - t0
    names = args.model or ["Qwen/Qwen3-8B"]
    models = configs.known_model_ids() if args.all else \
        list(dict.fromkeys(m for name in names for m in configs.select(name).model_ids))
    rows = []
    print(f"imports (torch {torch.__version__}, transformers {transformers.__version__}): {import_s:.1f} s; "
          f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}")
    print(f"{'model':40s} {'problems':>8s} {'trace s':>8s} {'valid. s':>8s} {'wall s':>7s} {'cpu s':>7s}  ok")
    for model_id in models:
        w, c = time.perf_counter(), time.process_time()
        result = extract_model(model_id, validate=not args.no_validate, use_hub=False)
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        ok = not result.failed
        rows.append({"model": model_id, "problems": len(result.drafts), "trace_s": round(result.trace_seconds, 2),
                     "validate_s": round(result.validate_seconds, 2), "wall_s": round(wall, 2),
                     "cpu_s": round(cpu, 2), "validated": len(result.validations), "ok": ok,
                     "reduced_validation": any(v.reduced for v in result.validations),
                     "max_abs_error": {v.problem: v.max_abs_error for v in result.validations},
                     "bit_exact": {v.problem: v.exact for v in result.validations}})
        over = "  over target" if wall > PER_MODEL_TARGET_S else ""
        print(f"{model_id:40s} {len(result.drafts):8d} {result.trace_seconds:8.1f} {result.validate_seconds:8.1f} "
              f"{wall:7.1f} {cpu:7.1f}  {'yes' if ok else 'NO'}{over}")
    total = time.perf_counter() - t0
    print(f"total {total:.1f} s, process CPU {time.process_time() - c0:.1f} s, load average "
          f"{os.getloadavg()[0]:.1f}; target {PER_MODEL_TARGET_S:.0f} s per model")
    if args.json:
        args.json.write_text(json.dumps({"import_s": round(import_s, 2), "models": rows, "total_s": round(total, 2),
                                         "load_average": os.getloadavg()[0]}, indent=2) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
