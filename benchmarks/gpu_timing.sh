#!/usr/bin/env bash
# One GPU call for the timing issue: timer GPU tests, then repeatability with the launch hold (the
# default) and without it, on a GEMM and two launch-bound eager references. Every step time-boxed.
#   bash benchmarks/gpu_timing.sh SHARED_DATASET_DIR [MAX_WORKLOADS]
set -u
SHARED=${1:?usage: gpu_timing.sh SHARED_DATASET_DIR [MAX_WORKLOADS]}
N=${2:-3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/solbench-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
step() { echo; echo "== $1 ($(date +%T))"; }
PROBLEMS="problem_defs/core/gemm_n4096_k4096 $SHARED/L1/069_rms_norm $SHARED/L1/084_silu_activation_backward"
step "timer GPU tests"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/timing 2>&1 | tail -3
step "repeatability, launch hold (default)"
timeout ${REP_TIMEOUT:-230} python3 benchmarks/repeatability.py $PROBLEMS --device cuda --max-workloads "$N" \
  --out "$OUT/repeatability_hold.json" 2>&1 | tail -$((3 * N + 8))
step "repeatability, --no-launch-hold"
timeout ${REP_TIMEOUT:-230} python3 benchmarks/repeatability.py $PROBLEMS --device cuda --max-workloads "$N" \
  --run-arg=--no-launch-hold --out "$OUT/repeatability_nohold.json" 2>&1 | tail -$((3 * N + 8))
