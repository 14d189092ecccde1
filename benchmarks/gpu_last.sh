#!/usr/bin/env bash
# The last GPU call of a session: pytest gate (non-compiled examples), repeatability, anti-cheat suite,
# speed-of-light check. Every step time-boxed.
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/solbench-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=$PYTHONPATH:/tmp/site
step() { echo; echo "== $1 ($(date +%T))"; }
step "pytest gate"
mkdir -p /tmp/sols && cp -r solutions/* /tmp/sols/ && find /tmp/sols -name "*.cu" -delete
timeout 110 python3 -m pytest -q -p no:cacheprovider -p solbench.pytest_plugin --solbench /tmp/sols --solbench-problems problem_defs \
  --solbench-require-gpu --solbench-max-workloads 2 --solbench-traces "$OUT/gate.jsonl" --solbench-benchmark-json "$OUT/bench.json" 2>&1 | tail -2
python3 -m solbench leaderboard "$OUT/gate.jsonl" -o "$OUT/gate_leaderboard.csv" >/dev/null 2>&1
mkdir -p /tmp/slowed && python3 tests/plugin/slow_copy.py solutions/rmsnorm_h4096/triton_rmsnorm.py /tmp/slowed/triton_rmsnorm.py --repeat 4
timeout 40 python3 -m pytest -q -p no:cacheprovider -p solbench.pytest_plugin --solbench /tmp/slowed --solbench-problems problem_defs \
  --solbench-max-workloads 2 --solbench-baseline "$OUT/gate_leaderboard.csv" --solbench-max-regression 5% 2>&1 | grep -E "REGRESSION|passed|failed" | head -3
step "repeatability"
timeout 130 python3 benchmarks/repeatability.py problem_defs/core/gemm_n4096_k4096 .gpu_data/sol-execbench/L1/069_rms_norm \
  .gpu_data/sol-execbench/L1/084_silu_activation_backward --device cuda --max-workloads 2 --out "$OUT/repeatability.json" 2>&1 | tail -14
step "anti-cheat"
timeout 120 python3 benchmarks/anticheat_gpu.py --devices cuda:0 --workloads 1 2>&1 | tail -34
step "speed of light"
timeout 45 python3 benchmarks/sol_gpu_check.py --shared .gpu_data/sol-execbench --out "$OUT/sol_check" 2>&1 | tail -12
