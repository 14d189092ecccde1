"""How long `solbench extract` takes per model (trace + draft, and validation on CPU).

    HF_HUB_OFFLINE=1 python benchmarks/extract_speed.py                 # Qwen/Qwen3-8B
    HF_HUB_OFFLINE=1 python benchmarks/extract_speed.py --all --json out.json

The target is under 15 s per model on a 2-core machine, validation included. Wall time depends on
what else the machine runs, so the process CPU time is reported beside it (on an idle 2-core machine
wall time is about CPU time / 2 for the validation part, which uses both cores).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[], help="model id (repeatable)")
    parser.add_argument("--all", action="store_true", help="every shipped model")
    parser.add_argument("--no-validate", action="store_true")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args = parser.parse_args(argv)

    t0, c0 = time.perf_counter(), time.process_time()
    import torch
    import transformers

    from solbench.extract import configs
    from solbench.extract.pipeline import extract_model
    import_s = time.perf_counter() - t0
    models = configs.known_model_ids() if args.all else (args.model or ["Qwen/Qwen3-8B"])
    rows = []
    print(f"imports (torch {torch.__version__}, transformers {transformers.__version__}): {import_s:.1f} s; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
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
        print(f"{model_id:40s} {len(result.drafts):8d} {result.trace_seconds:8.1f} {result.validate_seconds:8.1f} "
              f"{wall:7.1f} {cpu:7.1f}  {'yes' if ok else 'NO'}")
    total = time.perf_counter() - t0
    print(f"total {total:.1f} s, process CPU {time.process_time() - c0:.1f} s")
    if args.json:
        args.json.write_text(json.dumps({"import_s": round(import_s, 2), "models": rows, "total_s": round(total, 2),
                                         "load_average": os.getloadavg()[0]}, indent=2) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
