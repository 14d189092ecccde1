#!/usr/bin/env bash
# Session GPU call C: the IPC test's warnings, moving a big output with and without IPC, and the
# multi-GB-output problems of the shared dataset (one workload each, reference as solution).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/site
OUT=${OUT:-/tmp/solbench-out}; mkdir -p "$OUT"
echo "== IPC test"
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runner/test_transfer_gpu.py -k travel_by_ipc --tb=long 2>&1 \
  | grep -E "^E .*(warnings|\[')|passed|failed" | cut -c1-400 | head -6
echo "== judge_transfer 2048 MiB: IPC, then bytes"
timeout 60 python3 benchmarks/judge_transfer.py --device cuda --mb 2048 2>&1 | tail -8
timeout 70 python3 benchmarks/judge_transfer.py --device cuda --mb 2048 --no-ipc 2>&1 | tail -8
echo "== big-output shared problems"
for p in 026_video_patch_embedding_projection 013_fused_residual_rms_norm_backward 003_lm_head_projection_with_logit_slicing; do
  timeout 80 python3 -m solbench run .gpu_data/sol-execbench/L1/$p --max-workloads 1 --trials 2 --timing-rounds 1 \
    --no-reference-timing --max-time 0.5 -o "$OUT/big.jsonl" >/dev/null 2>"$OUT/big_$p.err"; echo "$p exit $?"
done
python3 benchmarks/summarize_traces.py "$OUT/big.jsonl" --failures 5 2>&1 | tail -12
