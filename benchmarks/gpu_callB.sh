#!/usr/bin/env bash
# Session GPU call B: the rest of the pytest gate (SwiGLU examples and the shipped baselines; the other
# examples' traces come from call A in .gpu_data/gate1.jsonl), leaderboard + report over both, the
# slowed copy against that leaderboard, the IPC GPU tests, then the anti-cheat table.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/site
OUT=${OUT:-/tmp/solbench-out}; mkdir -p "$OUT"
echo "== gate (rest)"
timeout 200 python3 -m pytest -q -p no:cacheprovider -p solbench.pytest_plugin --solbench solutions/swiglu_mlp_gateup_h2048_i6144 reference_impls/core \
  --solbench-problems problem_defs/core --solbench-require-gpu --solbench-max-workloads 3 \
  --solbench-traces "$OUT/gate2.jsonl" --solbench-benchmark-json "$OUT/gate2_benchmark.json" -rf 2>&1 | tail -4
python3 -m solbench leaderboard .gpu_data/gate1.jsonl "$OUT/gate2.jsonl" -o "$OUT/leaderboard.csv" 2>&1 | tail -2
python3 -m solbench report .gpu_data/gate1.jsonl "$OUT/gate2.jsonl" -o "$OUT/report.html" 2>&1 | tail -1
echo "== slowed copy"
mkdir -p /tmp/slowed && python3 tests/plugin/slow_copy.py solutions/rmsnorm_h4096/triton_rmsnorm.py /tmp/slowed/triton_rmsnorm.py --repeat 4
timeout 60 python3 -m pytest -q -p no:cacheprovider -p solbench.pytest_plugin --solbench /tmp/slowed --solbench-problems problem_defs/core \
  --solbench-max-workloads 3 --solbench-baseline "$OUT/leaderboard.csv" --solbench-max-regression 5% 2>&1 \
  | grep -E "REGRESSION|passed|failed" | head -4
echo "== IPC GPU tests"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runner/test_transfer_gpu.py --tb=short 2>&1 | tail -4
echo "== anti-cheat table"
timeout 270 python3 benchmarks/anticheat_gpu.py --devices cuda:0 cuda:0 --workloads 1 2>&1 | tee "$OUT/anticheat.txt" | grep -v '^  ' | tail -52
