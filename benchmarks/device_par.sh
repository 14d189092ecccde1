#!/usr/bin/env bash
# device.sh step lists side by side, one list per GPU, so that one device call uses every GPU of the machine.
#
#   bash benchmarks/device_par.sh GROUP [GROUP ...]       (from the repository root, on the GPU machine)
#
# A GROUP is DEVICES:STEP[,STEP...][:VAR=VALUE;VAR=VALUE...]: DEVICES is a GPU index or several joined by '+'
# ("2+3" for a step that spreads over two GPUs), or `cpu` (no GPU visible); the settings are that group's
# environment (e.g. "1:languages:LANG_ARGS=--max-workloads 2 --only cute_dsl cutlass"). Each group runs device.sh with
# CUDA_VISIBLE_DEVICES set to its GPUs and OUT=$OUT/<devices>, and logs to $OUT/<devices>.log. The wheels
# (.whl/*.whl, .whl/common/*.whl, and with LANG_WHEELS=1 .whl/lang-*/) are installed once before the groups start.
#
# DEADLINE_S (default 540) stops every group still running after that many seconds, so that the call
# returns inside the device tool's limit with every log kept. At the end each log's last lines are printed.
# Groups share the host's CPUs: timings taken here are side by side with other work, and are compared only
# with figures taken the same way (an A/B runs both sides at once, on two GPUs).
set -u
OUT=${OUT:-/tmp/solbench-out}; mkdir -p "$OUT"
[ $# -gt 0 ] || { sed -n "2,$(( $(grep -n "^set -u" "$0" | cut -d: -f1) - 1 ))p" "$0"; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)

# LANG_WHEELS=1: the language wheels too (only once every part of them is here: a half-joined wheel
# installs half a package)
bash "$here/device.sh" "$([ -n "${LANG_WHEELS:-}" ] && echo lang-ready || echo wheels)" >"$OUT/wheels.log" 2>&1
export SOLBENCH_WHEELS_READY=1 SOLBENCH_FULL_LOG=1  # every line of every step in its group's log

pids=() names=()
for group in "$@"; do
  devices=${group%%:*} rest=${group#*:}
  [ "$devices" != "$group" ] || { echo "not DEVICES:STEPS[:VAR=VALUE;...]: $group"; exit 2; }
  steps=${rest%%:*} settings=()
  [ "$steps" = "$rest" ] || IFS=';' read -ra settings <<<"${rest#*:}"
  visible=$([ "$devices" = cpu ] && echo "" || echo "${devices//+/,}")
  mkdir -p "$OUT/$devices"
  # setsid: one process group per list, so that the deadline stops a list and everything it started
  CUDA_VISIBLE_DEVICES=$visible OUT=$OUT/$devices setsid env "${settings[@]}" bash "$here/device.sh" ${steps//,/ } \
    >"$OUT/$devices.log" 2>&1 &
  pids+=($!) names+=("$devices")
done

deadline=$(( $(date +%s) + ${DEADLINE_S:-540} ))
while [ "$(date +%s)" -lt $deadline ]; do
  alive=0; for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [ $alive -eq 1 ] || break
  sleep 2
done
for i in "${!pids[@]}"; do
  if kill -0 "${pids[$i]}" 2>/dev/null; then
    echo "== ${names[$i]}: stopped at the deadline" >>"$OUT/${names[$i]}.log"
    kill -TERM -- "-${pids[$i]}" 2>/dev/null; sleep 3; kill -KILL -- "-${pids[$i]}" 2>/dev/null
  fi
done
wait
for name in "${names[@]}"; do echo; echo "######## $name"; tail -n "${TAIL_LINES:-40}" "$OUT/$name.log"; done
