#!/usr/bin/env bash
# One GPU call for the evidence the issues ask for: speed-of-light checks and calibration, the
# repeatability benchmark, the pytest gate with leaderboard and report, the anti-cheat suite and a
# sample of extracted problems. Each step is time-boxed; everything lands in $OUT.
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/solbench-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
step() { echo; echo "== $1 ($(date +%T))"; }
step "speed of light"
timeout 100 python3 benchmarks/sol_gpu_check.py --shared .gpu_data/sol-execbench --out "$OUT/sol_check" 2>&1 | tail -16
timeout 40 python3 -m solbench hw calibrate --quick -o "$OUT/h100_measured.json" 2>&1 | tail -14
step "repeatability"
timeout 180 python3 benchmarks/repeatability.py problem_defs/core/gemm_n4096_k4096 \
  .gpu_data/sol-execbench/L1/069_rms_norm .gpu_data/sol-execbench/L1/084_silu_activation_backward \
  --device cuda --max-workloads 3 --out "$OUT/repeatability.json" 2>&1 | tail -24
step "pytest gate, leaderboard, report"
timeout 100 python3 -m pytest -q -p no:cacheprovider -p solbench.pytest_plugin --solbench solutions/ --solbench-require-gpu --solbench-max-workloads 3 \
  --solbench-traces "$OUT/solutions.jsonl" --solbench-benchmark-json "$OUT/benchmark.json" 2>&1 | tail -4
python3 -m solbench leaderboard "$OUT/solutions.jsonl" -o "$OUT/leaderboard.csv" 2>&1 | tail -2
python3 -m solbench report "$OUT/solutions.jsonl" -o "$OUT/report.html" 2>&1 | tail -2
mkdir -p /tmp/slowed; F=solutions/rmsnorm_h4096/triton_rmsnorm.py
python3 tests/plugin/slow_copy.py "$F" /tmp/slowed/$(basename "$F") --repeat 4
timeout 50 python3 -m pytest -q -p no:cacheprovider -p solbench.pytest_plugin --solbench /tmp/slowed --solbench-problems problem_defs --solbench-max-workloads 3 \
  --solbench-baseline "$OUT/leaderboard.csv" --solbench-max-regression 5% 2>&1 | grep -E "REGRESSION|passed|failed" | head -4
step "anti-cheat"
if [ -f benchmarks/anticheat_gpu.py ]; then timeout 90 python3 benchmarks/anticheat_gpu.py 2>&1 | tail -45; fi
