#!/usr/bin/env bash
# Session GPU call D: IPC test, the 10 GB-output problem, repeatability over 4 workloads of each problem.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site
OUT=${OUT:-/tmp/solbench-out}; mkdir -p "$OUT"
echo "== IPC GPU tests"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runner/test_transfer_gpu.py --tb=short 2>&1 | grep -E "^E |passed|failed" | cut -c1-300 | head -6
echo "== L1/026 (10 GB output)"
timeout 90 python3 -m solbench run .gpu_data/sol-execbench/L1/026_video_patch_embedding_projection --max-workloads 1 --trials 2 \
  --timing-rounds 1 --no-reference-timing --max-time 0.5 -o "$OUT/big.jsonl" >/dev/null 2>"$OUT/big.err"; echo "exit $?"
python3 benchmarks/summarize_traces.py "$OUT/big.jsonl" --failures 3 2>&1 | grep -E "status|seconds|latency|RUNTIME|TIMEOUT" | cut -c1-300
echo "== repeatability"
timeout 180 python3 benchmarks/repeatability.py problem_defs/core/gemm_n4096_k4096 .gpu_data/sol-execbench/L1/069_rms_norm \
  .gpu_data/sol-execbench/L1/084_silu_activation_backward --device cuda --max-workloads 3 --out "$OUT/repeatability.json" 2>&1 | tail -16
