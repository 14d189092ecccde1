#!/usr/bin/env bash
# One GPU call: every problem of a dataset with its reference as the solution, spread over the GPUs.
# Usage (device machine, repo root): bash benchmarks/gpu_dataset.sh DATASET_DIR [SECONDS] [extra solbench run args]
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/solbench-out}; mkdir -p "$OUT"
dataset=$1; seconds=${2:-540}; shift 2 || true
nvidia-smi --query-gpu=index,name,clocks.sm,temperature.gpu --format=csv,noheader
if [ -n "${SAMPLE:-}" ]; then  # a sample of other problems first (e.g. extracted ones), time-boxed
  timeout "${SAMPLE_SECONDS:-120}" python3 -m solbench run "$SAMPLE" --max-workloads 2 --trials 2 --max-time 0.5 \
    -o "$OUT/sample.jsonl" >/dev/null 2>"$OUT/sample.err"
  python3 benchmarks/summarize_traces.py "$OUT/sample.jsonl" --failures 20
fi
if [ -n "${RESUME:-}" ]; then cp "$RESUME" "$OUT/dataset.jsonl"; fi  # traces of an earlier run: resumed, not redone
timeout "$seconds" python3 -m solbench run "$dataset" --max-workloads 2 --trials 2 --max-time 0.5 \
  -o "$OUT/dataset.jsonl" "$@" >"$OUT/dataset.out" 2>"$OUT/dataset.err"
echo "solbench run exit: $?"
tail -3 "$OUT/dataset.err"
python3 benchmarks/summarize_traces.py "$OUT/dataset.jsonl" --failures 80
