#!/usr/bin/env bash
# Issue 34 (typed formats) on a GPU machine: `solbench run` traces of 3 shipped problems with main's code and
# with this checkout's must agree field for field (the version field aside), and the formats benchmark.
#
#   bash benchmarks/formats_gpu_check.sh [BASE_REV]      (from the repository root; BASE_REV default main)
#
# Needs pydantic installed (pip install pydantic>=2.12). Prints trace_fields.py's verdict, then the
# benchmark table; exit status 1 where the traces differ.
set -u
export PYTHONUNBUFFERED=1
BASE_REV=${1:-main}
OUT=${OUT:-/tmp/solbench-out}/formats; rm -rf "$OUT"; mkdir -p "$OUT/base"
git archive "$BASE_REV" | tar -x -C "$OUT/base" || exit 2
for problem in rmsnorm_h4096 layernorm_fp32_h1024 gemm_n4096_k4096; do
  solution=solutions/$problem/torch_${problem%%_*}.py
  for side in base here; do
    root=$([ $side = base ] && echo "$OUT/base" || pwd)
    (cd "$root" && PYTHONPATH=$root timeout 600 python3 -m solbench run "problem_defs/core/$problem" \
      --solution "$solution" --max-workloads 2 --seed 7 -o "$OUT/$side.jsonl" > "$OUT/$side-$problem.log" 2>&1)
    echo "$side $problem: exit $? ($(wc -l < "$OUT/$side.jsonl") traces so far)"
  done
done
PYTHONPATH=$PWD python3 benchmarks/trace_fields.py "$OUT/base.jsonl" "$OUT/here.jsonl"; verdict=$?
PYTHONPATH=$PWD timeout 600 python3 benchmarks/formats_bench.py --before "$OUT/base"
exit $verdict
