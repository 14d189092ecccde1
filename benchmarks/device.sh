#!/usr/bin/env bash
# The one runner for a GPU machine: named steps, each time-boxed, output kept under $OUT.
#
#   bash benchmarks/device.sh STEP [STEP ...]        (from the repository root, on the GPU machine)
#
# Steps:
#   env            GPU, driver, versions, CUPTI, and which OS sandbox mechanisms the machine allows
#   gpu-tests      pytest -m gpu over tests/
#   timer          benchmarks/timing_gpu_check.py (the timer's CUDA paths)
#   anticheat      benchmarks/anticheat_gpu.py (every hostile and legitimate case; REPEAT=N repeats each)
#   anticheat-user the same as an ordinary user (nobody, through setpriv): issue 32's non-root run
#   gate           pytest --solbench over the shipped solutions and baselines, leaderboard, report, a slowed copy
#   repeatability  benchmarks/repeatability.py (a GEMM and two eager references, run twice)
#   throughput     benchmarks/throughput.py (the 10 problems of docs/dataset_run.md, 4 workloads each)
#   dataset        solbench run over the whole shared dataset, first workload of each problem (resumable)
#   sol            benchmarks/sol_gpu_check.py (calibration, bounds against eager timings)
#   ray-check      the carried Ray bundle: a 2-CPU local cluster runs a task (issue 17's packaging)
#   cluster        issue 17: 10 shared problems, Ray on 1 GPU then local on 1 GPU, statuses and throughput
#   cluster-head   the same, every Ray run connecting to one Ray head started before it (as on a real cluster)
#   scaling-local  issue 18: 40 shared problems, first 2 workloads, local --devices on 1, 2, 4 GPUs
#   scaling-ray    issue 18: the same through a local Ray cluster (statuses compared with scaling-local's 1 GPU)
#   scaling        issue 18 in one go: local then Ray (against one pre-started head) on 1, 2, 4 GPUs, traces kept
#   scaling-kill   issue 18: 20 problems through Ray on 2 GPUs, one actor killed mid-run: none lost or duplicated
#   lang-tests     issue 33: the language wheels of .whl/lang-*/ installed (split wheels joined), then the
#                  new languages' GPU tests, every example through its loader, and their anti-cheat cases
#   languages      issue 33: benchmarks/languages_gpu.py, every example solution in every language with CUDA
#                  graphs on and off (LANG_ARGS: more options, e.g. "--max-workloads 3")
#   containment    issue 32: the sandbox's mechanisms here, CUDA/Triton/compile/CUPTI/nvcc inside it, root and
#                  ordinary-user workers, nothing outliving a GPU worker, the gate's integrity
#   serve-agent    issue 35: benchmarks/agent_loop.py, 21 candidates of rmsnorm_h4096 (4 workloads each), one
#                  `solbench run` per candidate against one `solbench serve`: seconds per verdict, statuses
#   agent-loop     issue 49: benchmarks/agent_loop.py, 20 candidates of layernorm_fp32_h1024 (PyTorch and Triton;
#                  correct, wrong, slower) as a cold `solbench run` each, a kept Evaluator and `solbench serve`
#                  (AGENT_ARGS: more options, e.g. "--max-workloads 2")
#   serve-issue15  issue 35: issue 15's ten problems (4 workloads): one cold `solbench run`, then a `solbench serve`
#                  judging them twice (the second pass: problems seen before, baseline times reused)
#   serve-scaling  issue 35: 40 shared problems x 2 workloads through `solbench serve` on 1, 2, 4 GPUs, a running
#                  solution worker killed in each (re-queued: none lost or duplicated), statuses against 1 GPU's
#   serve-anticheat issue 35: every anti-cheat case submitted through a `solbench serve`
#   nvidia-issue15 NVIDIA's own harness (NVIDIA_TREE, default .gpu_data/nvidia: its src/ and scripts/, not ours to
#                  commit) on the same 40 workloads, reference as solution: issue 35's side-by-side yardstick
#   throughput-base  the same with an older tree's solbench (BASE_TREE, default .gpu_data/fe9e8ce): an A/B
#   gpu-tests-core pytest -m gpu over tests/timing, tests/check and tests/runner
#   gpu-tests-some pytest -m gpu over PYTEST_ARGS (default tests/runner)
#   block-profile  benchmarks/block_profile.py on PROFILE_PROBLEMS (default L1/069_rms_norm L2/005_swiglu_mlp_backward),
#                  for each tree in PROFILE_TREES (default .)
#   cmd            the command in CMD (CMD_SECONDS, CMD_LINES), with the step's environment (a diagnostic)
#   formats        issue 34: benchmarks/formats_gpu_check.sh against FORMATS_BASE (default .gpu_data/base)
#   sol-time       issue 36: `solbench sol` over the whole dataset on two pinned cores, --jobs 2 --no-cache
#   wheels         nothing but the wheels' install; lang-ready: the language wheels' too (device_par.sh)
#   startup        benchmarks/startup_profile.py: a worker's start-up stages, workers' readiness, the driver's
#                  device listing (torch vs NVML), alone and with every GPU's workers starting at once
#
# Environment: OUT (default /tmp/solbench-out), SHARED (the SOL-ExecBench dataset; default .gpu_data/
# sol-execbench, a copy carried with the working tree), STEP_SECONDS (overrides every step's time box),
# REPEAT (anticheat), ENGINES (serve-issue15's, default local,serve), SERVE_ARGS (more `solbench serve` options for serve-agent and serve-issue15, e.g.
# "--no-reuse-eager-reference"), GPUS (scaling steps' GPU counts, default 1,2,4), ENGINES (the scaling step's, default local,ray), PROBLEMS and RUN_ARGS (cluster and scaling steps: how many shared problems, and more
# `solbench run` options such as "--trials 1 --timing-rounds 1"). Wheels in .whl/ (e.g. cupti-python for
# CUPTI activity) are installed to /tmp/site first, and .whl/ray_bundle.tar.xz (benchmarks/ray_bundle.py
# build) unpacked there. Nothing here changes the GPU's clocks, power or mode.
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/solbench-out}; mkdir -p "$OUT"
SHARED=${SHARED:-.gpu_data/sol-execbench}
# Small wheels: .whl/*.whl and .whl/common/*.whl. SOLBENCH_WHEELS_READY=1 (device_par.sh, which installs them once
# before its groups start) leaves /tmp/site as it is: two groups installing into it at once would race.
if ls .whl/*.whl .whl/common/*.whl 2>/dev/null | grep -q .; then
  [ -n "${SOLBENCH_WHEELS_READY:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site $(ls .whl/*.whl .whl/common/*.whl 2>/dev/null)
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
site_pth_paths() {  # what the .pth files in /tmp/site add (nvidia-cutlass-dsl puts its packages on sys.path that
  # way): exported for every step, so that a step which does not install the language wheels itself (gate, under
  # device_par.sh with LANG_WHEELS=1) still finds them
  local extra
  [ -d /tmp/site ] || return 0
  case ":$PYTHONPATH:" in *:/tmp/site:*) ;; *) export PYTHONPATH=$PYTHONPATH:/tmp/site ;; esac
  extra=$(python3 -c "import site, sys; b = set(sys.path); site.addsitedir('/tmp/site'); print(':'.join(p for p in sys.path if p not in b))")
  [ -z "$extra" ] || case ":$PYTHONPATH:" in *":$extra:"*) ;; *) export PYTHONPATH=$PYTHONPATH:$extra ;; esac
}
[ -z "${SOLBENCH_WHEELS_READY:-}" ] || site_pth_paths
if [ -f .whl/ray_bundle.tar.xz ] && ! python3 -c "import ray" 2>/dev/null; then
  python3 benchmarks/ray_bundle.py install .whl/ray_bundle.tar.xz /tmp/site | trim 1
  case ":$PYTHONPATH:" in *:/tmp/site:*) ;; *) export PYTHONPATH=$PYTHONPATH:/tmp/site ;; esac
fi

box() { timeout "${STEP_SECONDS:-$1}" "${@:2}"; }
# A step's output, cut to its last N lines for the call's reply; whole with SOLBENCH_FULL_LOG=1 (device_par.sh,
# whose logs are files: a step stopped at the deadline then still leaves every line it printed)
trim() { if [ -n "${SOLBENCH_FULL_LOG:-}" ]; then cat; else tail -n "$1"; fi; }
visible_gpus() {  # cuda:0 cuda:1 ... for every GPU this step may use (CUDA_VISIBLE_DEVICES, else the machine's)
  local n
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then n=$(echo "$CUDA_VISIBLE_DEVICES" | tr , '\n' | grep -c .)
  else n=$(nvidia-smi -L 2>/dev/null | grep -c .); fi
  [ "$n" -gt 0 ] && seq 0 $((n - 1)) | sed 's/^/cuda:/' | paste -sd' ' -
}
say() { echo; echo "== $1 ($(date +%T))"; }

step_env() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  python3 -c "from solbench.worker.probe import load_cupti; print('cupti:', 'yes' if load_cupti() else 'no')"
  python3 -m solbench.worker.sandbox 2>/dev/null || echo "sandbox probe: not available in this version"
  box 300 python3 benchmarks/sandbox_check.py 2>&1 | trim 12
}
step_containment() {
  python3 -m solbench.worker.sandbox | grep -E '"(uid|cgroup|namespaces|landlock|capabilities|seccomp|contained_by)"'
  box 300 python3 benchmarks/sandbox_check.py 2>&1 | trim 13
  box 420 python3 -m pytest -q -p no:cacheprovider -rs -s tests/anticheat/test_containment.py \
    tests/anticheat/test_containment_gpu.py tests/plugin/test_gate_integrity.py -rfs 2>&1 | grep -E "contained_by|passed|failed|SKIP|Error|^FAILED" | trim 20
}
step_gpu_tests() { box 420 python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | trim 30; }
step_timer() { box 120 python3 benchmarks/timing_gpu_check.py 2>&1 | trim 20; }
step_anticheat() {  # spread over every visible GPU; ANTICHEAT_ARGS: more options (e.g. "--workloads 1 --part 1/2")
  local devices; devices=$(visible_gpus)
  box 560 python3 benchmarks/anticheat_gpu.py ${devices:+--devices $devices} ${REPEAT:+--repeat $REPEAT} \
    ${ANTICHEAT_ARGS:-} 2>&1 | trim 60
}
step_anticheat_user() {  # issue 32: the same suite run by an ordinary user (nobody) instead of root
  local home=/tmp/solbench-nobody devices uid=65534; devices=$(visible_gpus)
  rm -rf $home && mkdir -p $home/state $home/cache $home/runs $home/sol-cache $home/tmp && chown -R $uid:$uid $home
  box 560 setpriv --reuid=$uid --regid=$uid --clear-groups env HOME=$home TMPDIR=$home/tmp XDG_CACHE_HOME=$home/cache \
    SOLBENCH_STATE_DIR=$home/state SOLBENCH_RUNS_DIR=$home/runs SOLBENCH_SOL_CACHE=$home/sol-cache \
    python3 benchmarks/anticheat_gpu.py ${devices:+--devices $devices} ${ANTICHEAT_ARGS:-} 2>&1 | trim 60
}
step_gate() {
  box 540 python3 -m pytest -q -p no:cacheprovider -p solbench.pytest_plugin --solbench solutions reference_impls/core/*.baseline.py \
    --solbench-problems problem_defs/core --solbench-require-gpu --solbench-max-workloads 3 \
    --solbench-traces "$OUT/gate.jsonl" --solbench-benchmark-json "$OUT/gate_benchmark.json" -rf 2>&1 | trim 12
  python3 -m solbench leaderboard "$OUT/gate.jsonl" -o "$OUT/leaderboard.csv" 2>&1 | trim 2
  python3 -m solbench report "$OUT/gate.jsonl" -o "$OUT/report.html" 2>&1 | trim 2
  mkdir -p /tmp/slowed && python3 tests/plugin/slow_copy.py solutions/rmsnorm_h4096/triton_rmsnorm.py /tmp/slowed/triton_rmsnorm.py --repeat 4
  box 120 python3 -m pytest -q -p no:cacheprovider -p solbench.pytest_plugin --solbench /tmp/slowed \
    --solbench-problems problem_defs/core --solbench-max-workloads 3 --solbench-baseline "$OUT/leaderboard.csv" \
    --solbench-max-regression 5% 2>&1 | grep -E "REGRESSION|passed|failed" | head -4
}
step_repeatability() {
  box 300 python3 benchmarks/repeatability.py problem_defs/core/gemm_n4096_k4096 "$SHARED/L1/069_rms_norm" \
    "$SHARED/L1/084_silu_activation_backward" --device cuda --max-workloads 3 --out "$OUT/repeatability.json" 2>&1 | trim 20
}
step_throughput() { throughput_in . throughput; }
issue15_problems() {  # issue 15's ten problems (benchmarks/throughput.py's default set), one per line
  python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import throughput; print(*throughput.DEFAULT_PROBLEMS, sep='\n')"
}
issue15_dataset() {  # $1: a fresh folder holding copies of issue 15's problems, laid out as the dataset is
  local p
  rm -rf "$1"
  for p in $(issue15_problems); do mkdir -p "$1/$(dirname "$p")" && cp -r "$SHARED/$p" "$1/$p"; done
}
step_nvidia_issue15() {  # issue 35's yardstick: NVIDIA's own harness on issue 15's 40 workloads, reference as solution
  # NVIDIA_TREE (default .gpu_data/nvidia) holds src/ and scripts/run_dataset.py of github.com/NVIDIA/SOL-ExecBench,
  # carried for the measurement and never committed; .whl/nv/ its wheels that the image lacks (click, rich and
  # theirs). Its run_dataset.py calls the console script beside sys.executable: a bare venv gets one.
  local nv ds=/tmp/nvidia-issue15 venv=/tmp/nvidia-venv sp start
  nv=$(cd "${NVIDIA_TREE:-.gpu_data/nvidia}" 2>/dev/null && pwd) || { echo "no NVIDIA tree at ${NVIDIA_TREE:-.gpu_data/nvidia}"; return; }
  [ -d /tmp/nvidia-site ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/nvidia-site .whl/nv/*.whl
  rm -rf "$venv" "$OUT/nvidia"
  issue15_dataset "$ds"
  python3 -m venv --without-pip "$venv"
  printf '#!%s\nfrom sol_execbench.cli.main import cli\ncli()\n' "$venv/bin/python3" >"$venv/bin/sol-execbench"
  chmod +x "$venv/bin/sol-execbench"
  sp=$(python3 -c "import site; print(':'.join(site.getsitepackages()))")
  start=$(date +%s.%N)
  PYTHONPATH=$nv/src:/tmp/nvidia-site:$PYTHONPATH:$sp box 560 "$venv/bin/python3" "$nv/scripts/run_dataset.py" "$ds" \
    --max-workloads 4 -o "$OUT/nvidia" >"$OUT/nvidia.log" 2>&1
  echo "NVIDIA's harness (run_dataset.py, reference as solution, 4 workloads each): exit $?," \
    "wall $(python3 -c "import time; print(f'{time.time() - $start:.1f}')") s" | tee "$OUT/nvidia_wall.txt"
  tail -n 18 "$OUT/nvidia.log"
}
step_throughput_base() { throughput_in "${BASE_TREE:-.gpu_data/fe9e8ce}" throughput_base; }
throughput_in() {  # $1 the tree whose solbench runs (an older commit's, for an A/B), $2 the name of its results
  local problems=() p shared
  shared=$(cd "$SHARED" && pwd)
  for p in $(issue15_problems); do problems+=("$shared/$p"); done
  # the tree's own throughput.py runs its own tree's solbench (it puts that tree first on the child's path)
  box 540 python3 "$1/benchmarks/throughput.py" "${problems[@]}" --device cuda --json "$OUT/$2.json" \
    --traces "$OUT/$2.jsonl" 2>&1 | trim 50
}
step_dataset() {
  box 540 python3 -m solbench run "$SHARED" --max-workloads 1 -o "$OUT/dataset.jsonl" >"$OUT/dataset.out" 2>"$OUT/dataset.err"
  echo "solbench run exit: $?"; tail -3 "$OUT/dataset.err"
  python3 benchmarks/summarize_traces.py "$OUT/dataset.jsonl" --failures 40
}
step_block_profile() {  # issue 31: what a timed block's end costs on a GPU, in process (PROFILE_PROBLEMS; PROFILE_TREES,
  # e.g. ". .gpu_data/fe9e8ce" for an A/B of the same blocks)
  local p tree
  for tree in ${PROFILE_TREES:-.}; do
    for p in ${PROFILE_PROBLEMS:-L1/069_rms_norm L2/005_swiglu_mlp_backward}; do
      box 200 python3 benchmarks/block_profile.py "$SHARED/$p" --blocks 4 --top 40 --worker --tree "$tree" 2>&1 | trim 60
    done
  done
}
step_cmd() { box "${CMD_SECONDS:-500}" bash -c "$CMD" 2>&1 | trim "${CMD_LINES:-40}"; }  # CMD: any command (a diagnostic)
step_gpu_tests_some() { box 420 python3 -m pytest -q -m gpu -p no:cacheprovider ${PYTEST_ARGS:-tests/runner} 2>&1 | trim 15; }
step_gpu_tests_core() { box 420 python3 -m pytest -q -m gpu -p no:cacheprovider tests/timing tests/check tests/runner 2>&1 | trim 15; }
step_formats() { box 500 bash benchmarks/formats_gpu_check.sh "${FORMATS_BASE:-.gpu_data/base}" 2>&1 | trim 30; }
step_sol_time() {  # issue 36: the analysis of every shared problem on two cores, no cache (CPU only)
  local n start=$SECONDS; n=$(nproc)
  CUDA_VISIBLE_DEVICES= box 900 taskset -c "$((n - 2)),$((n - 1))" python3 -m solbench sol "$SHARED" --hw b200 \
    --convention solar --jobs 2 --no-cache --json >"$OUT/sol_all.jsonl" 2>"$OUT/sol_all.err"
  echo "solbench sol over $SHARED on 2 cores, --jobs 2 --no-cache: exit $?, $((SECONDS - start)) s," \
    "$(wc -l <"$OUT/sol_all.jsonl") records"
  tail -3 "$OUT/sol_all.err"
}
step_sol() { box 200 python3 benchmarks/sol_gpu_check.py --shared "$SHARED" --out "$OUT/sol_check" 2>&1 | trim 45; }
step_ray_check() {
  box 120 python3 benchmarks/ray_bundle.py check /tmp/site 2>&1 | grep -v -e "^202.*WARNING" | trim 5
}
gpu_counts() {  # the GPU counts of $1 (comma-separated) that this machine has
  local n; n=$(nvidia-smi -L 2>/dev/null | wc -l)
  echo "$1" | tr , '\n' | awk -v n="$n" '$1 <= n' | paste -sd, -
}
scaling() {  # $1 engines, $2 GPU counts, $3 picked problems, $4 seconds, rest: more options
  local counts; counts=$(gpu_counts "$2")
  [ -n "$counts" ] || { echo "no GPU"; return; }
  box "$(( $4 + 30 ))" python3 benchmarks/cluster_throughput.py "$SHARED" --pick "$3" --max-workloads 2 \
    --engines "$1" --gpus "$counts" --budget-s "$4" "${@:5}" 2>&1 | trim 30
}
KEEP=/tmp/solbench-keep  # outlives one device command ($OUT does not): scaling-ray compares with scaling-local
step_cluster() { scaling ray,local 1 10 510 --json "$OUT/cluster.json"; }
step_cluster_head() { scaling ray,local 1 10 510 --ray-head --json "$OUT/cluster_head.json"; }
step_scaling_local() {
  mkdir -p $KEEP; scaling local "${GPUS:-1,2,4}" 40 510 --json "$KEEP/scaling_local.json" --keep-traces "$OUT/traces_local"; cp $KEEP/scaling_local.json "$OUT/" 2>/dev/null
}
step_scaling_ray() { scaling ray "${GPUS:-1,2,4}" 40 510 --json "$OUT/scaling_ray.json" --compare-to "$KEEP/scaling_local.json"; }
lang_wheels() {  # issue 33's wheels, carried in folders .whl/lang-1, .whl/lang-2, ... (a wheel too big for one
  # call's 64 MiB split into NAME.whl.part-aa, -ab, ... across them, in folder order), installed into /tmp/site
  local dir=/tmp/solbench-lang-wheels first name
  mkdir -p $dir
  [ -n "${SOLBENCH_WHEELS_READY:-}" ] || for first in .whl/lang-*/*.whl.part-aa; do
    [ -f "$first" ] || continue
    name=$(basename "${first%.part-aa}")
    cat .whl/lang-*/"$name".part-* > "$dir/$name"
  done
  [ -n "${SOLBENCH_WHEELS_READY:-}" ] || cp .whl/lang-*/*.whl "$dir/" 2>/dev/null
  local todo=() wheel
  [ -n "${SOLBENCH_WHEELS_READY:-}" ] || for wheel in "$dir"/*.whl; do  # a package the machine already has (cuda-bindings, protobuf) is left alone
    python3 -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$(basename "$wheel" | cut -d- -f1)" \
      2>/dev/null || todo+=("$wheel")
  done
  [ ${#todo[@]} -eq 0 ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site "${todo[@]}"
  site_pth_paths
  python3 -c "from solbench import languages; [print(f'{l.name:15}', l.refusal([], True) or 'ready') for l in languages.known()]"
}
step_lang_tests() {
  lang_wheels
  box 420 python3 -m pytest -q -m gpu -p no:cacheprovider tests/languages tests/test_example_solutions.py 2>&1 | trim 25
  box 150 python3 benchmarks/anticheat_gpu.py --only cute_dsl_cache_by_address cudnn_frontend_cache_by_address \
    cpp_thread_after_return cutlass_thread_after_return cudnn_thread_after_return cublas_thread_after_return 2>&1 | trim 15
}
step_wheels() { :; }  # the wheels install above, before any step
step_lang_ready() { lang_wheels; }
step_languages() { lang_wheels; box 560 python3 benchmarks/languages_gpu.py ${LANG_ARGS:-} 2>&1 | trim 45; }
step_startup() { box 300 python3 benchmarks/startup_profile.py --json "$OUT/startup.json" 2>&1 | trim 20; }
step_scaling() { scaling "${ENGINES:-local,ray}" "${GPUS:-1,2,4}" 40 520 --ray-head --json "$OUT/scaling.json" --keep-traces "$OUT/traces"; }
step_scaling_kill() { scaling ray 2 20 400 --kill-after 8 --json "$OUT/scaling_kill.json"; }
step_serve_agent() {
  box 570 python3 benchmarks/agent_loop.py problem_defs/core/rmsnorm_h4096 --ways cli,serve --rounds 7 \
    --max-workloads 4 --serve-args="${SERVE_ARGS:-}" --json "$OUT/serve_agent.json" 2>&1 | trim 30
}
step_agent_loop() {
  box 570 python3 benchmarks/agent_loop.py --device cuda --json "$OUT/agent_loop.json" ${AGENT_ARGS:-} 2>&1 | trim 45
}
step_serve_issue15() {
  local ds=/tmp/solbench-issue15
  issue15_dataset $ds
  box 580 python3 benchmarks/cluster_throughput.py $ds --max-workloads 4 --every-problem --engines "${ENGINES:-local,serve}" \
    --gpus 1 --serve-passes 2 --serve-args="${SERVE_ARGS:-}" --budget-s 570 --json "$OUT/serve_issue15.json" 2>&1 | trim 12
}
step_serve_scaling() { scaling serve "${GPUS:-1,2,4}" 40 520 --kill-after 10 --json "$OUT/serve_scaling.json"; }
step_serve_anticheat() { box 560 python3 benchmarks/anticheat_gpu.py --serve 2>&1 | trim 60; }

[ $# -gt 0 ] || { sed -n "2,$(( $(grep -n '^set -u' "$0" | cut -d: -f1) - 1 ))p" "$0"; exit 2; }
for name in "$@"; do
  fn="step_${name//-/_}"
  if ! declare -F "$fn" >/dev/null; then echo "unknown step: $name"; exit 2; fi
  say "$name"
  "$fn"
done
