#!/usr/bin/env bash
# Issue 34 (typed formats) on a GPU machine: `solbench run` traces of 3 shipped problems with main's code and
# with this checkout's must agree field for field (the version field aside), and the formats benchmark.
#
#   bash benchmarks/formats_gpu_check.sh [BASE]      (from the repository root)
#
# BASE is the code before the change: a folder holding that tree (e.g. .whl/base, made beforehand with
# `git archive 2b662b1 | tar -x -C .whl/base`, where the machine has no git history), or a git revision
# (default 2b662b1, the commit issue 34a started from).
#
# Needs pydantic importable (installed, or its wheels in a folder on PYTHONPATH such as /tmp/site). Prints trace_fields.py's verdict, then the
# benchmark table; exit status 1 where the traces differ.
set -u
export PYTHONUNBUFFERED=1
BASE=${1:-2b662b1}
OUT=${OUT:-/tmp/solbench-out}/formats; rm -rf "$OUT"; mkdir -p "$OUT/base"
if [ -d "$BASE" ]; then cp -r "$BASE"/. "$OUT/base/"; else git archive "$BASE" | tar -x -C "$OUT/base" || exit 2; fi
for problem in rmsnorm_h4096 layernorm_fp32_h1024 gemm_n4096_k4096; do
  solution=solutions/$problem/torch_${problem%%_*}.py
  for side in base here; do
    root=$([ $side = base ] && echo "$OUT/base" || pwd)
    (cd "$root" && PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH} timeout 600 python3 -m solbench run "problem_defs/core/$problem" \
      --solution "$solution" --max-workloads 2 --seed 7 -o "$OUT/$side.jsonl" > "$OUT/$side-$problem.log" 2>&1)
    echo "$side $problem: exit $? ($(wc -l < "$OUT/$side.jsonl") traces so far)"
  done
done
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} python3 benchmarks/trace_fields.py "$OUT/base.jsonl" "$OUT/here.jsonl"; verdict=$?
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} timeout 600 python3 benchmarks/formats_bench.py --before "$OUT/base"
exit $verdict
