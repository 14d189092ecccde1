#!/usr/bin/env bash
# The CI-gate GPU check: `pytest --solbench` over every shipped example (PyTorch, Triton, CUDA C++) and
# the problems' optimised baselines, a deliberately slowed copy against the recorded leaderboard, then
# the leaderboard CSV and the HTML report of that run. Outputs land in $OUT.
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/solbench-out}; mkdir -p "$OUT"
N=${1:-3}
step() { echo; echo "== $1 ($(date +%T))"; }
step "pytest --solbench solutions/ (all examples, GPU required)"
timeout ${GATE_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider -p solbench.pytest_plugin --solbench solutions reference_impls/core/*.baseline.py \
  --solbench-problems problem_defs/core --solbench-require-gpu --solbench-max-workloads "$N" \
  --solbench-traces "$OUT/gate.jsonl" --solbench-benchmark-json "$OUT/gate_benchmark.json" -rf 2>&1 | tail -8
python3 -m solbench leaderboard "$OUT/gate.jsonl" -o "$OUT/leaderboard.csv" 2>&1 | tail -3
python3 -m solbench leaderboard "$OUT/gate.jsonl" --format md 2>&1 | head -40
python3 -m solbench report "$OUT/gate.jsonl" -o "$OUT/report.html" 2>&1 | tail -2
step "slowed copy against the recorded leaderboard"
mkdir -p /tmp/slowed && python3 tests/plugin/slow_copy.py solutions/rmsnorm_h4096/triton_rmsnorm.py /tmp/slowed/triton_rmsnorm.py --repeat 4
timeout 60 python3 -m pytest -q -p no:cacheprovider -p solbench.pytest_plugin --solbench /tmp/slowed \
  --solbench-problems problem_defs/core --solbench-max-workloads "$N" --solbench-baseline "$OUT/leaderboard.csv" \
  --solbench-max-regression 5% 2>&1 | grep -E "REGRESSION|passed|failed" | head -4
