#!/usr/bin/env bash
# Session GPU call: CUPTI availability, repeatability (launch hold), the GPU-marked tests.
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/solbench-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PYTHONPATH:/tmp/site
step() { echo; echo "== $1 ($(date +%T))"; }
step "cupti"
python3 - <<'PY'
import torch
from solbench.check.cupti_activity import load_cupti, probe
print("cupti module:", load_cupti())
x = torch.randn(1 << 20, device="cuda")
r = probe(lambda i: None, lambda i: x.mul_(1.0), first_index=0)
print("probe:", r.cupti, "span_ms", [round(v, 4) for v in r.span_ms], "event_ms", [round(v, 4) for v in r.event_ms])
PY
step "repeatability"
timeout 200 python3 benchmarks/repeatability.py problem_defs/core/gemm_n4096_k4096 .gpu_data/sol-execbench/L1/069_rms_norm \
  .gpu_data/sol-execbench/L1/084_silu_activation_backward --device cuda --max-workloads 3 --out "$OUT/repeatability.json" 2>&1 | tail -16
step "pytest -m gpu"
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests -x 2>&1 | tail -15
