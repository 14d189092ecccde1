#!/usr/bin/env bash
# One GPU call: GPU tests, timer checks, shipped examples, and a time-boxed slice of a dataset.
# Usage (device machine, repo root): bash benchmarks/gpu_smoke.sh [DATASET_DIR] [SECONDS_FOR_DATASET]
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/solbench-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
echo "== gpu tests"; timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tail -25
echo "== timer check"; timeout 120 python3 benchmarks/timing_gpu_check.py 2>&1 | tail -20
echo "== examples"; timeout 300 python3 -m solbench run --max-workloads 3 -o "$OUT/examples.jsonl" 2>&1 | tail -22
if [ -n "${1:-}" ]; then
  echo "== dataset slice"; timeout "${2:-240}" python3 -m solbench run "$1" --max-workloads 2 --trials 2 -o "$OUT/dataset.jsonl" >/dev/null 2>"$OUT/dataset.err"
  python3 - "$OUT/dataset.jsonl" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
c = collections.Counter(r["evaluation"]["status"] for r in rows); print(len(rows), "workloads", dict(c))
for r in rows:
    e = r["evaluation"]
    if e["status"] != "PASSED":
        print(r["definition"][:50], e["status"], e["log"].strip().splitlines()[-1][:160] if e["log"].strip() else "")
PY
fi
