#!/usr/bin/env bash
# The busy-machine table: each command alone, beside one and beside two busy processes
# (`yes > /dev/null`, started and killed here), at tapegrad's default thread count and at
# --threads 1, with PyTorch 2.x beside the training workloads at its default and at 1 thread.
# Prints one markdown table, a row per command and load, with the ratio default / 1 thread; the
# bound the thread policy promises (runtime/threads.h) is a ratio of at most 1.3 on every row.
#
# The commands: `tapegrad bench` on every training workload (textcls-small, textcls-mid,
# timeseries, attn-long, charlm: ms per step, the median of STEPS), the int8 inference of
# textcls-mid (`bench --int8`, the dynamic int8 forward's ms per batch), `tapegrad sample --tokens
# 300` from a small char LM this script trains first (LM_STEPS steps of docs/cli.md's recipe, in a
# temporary directory), and `tapegrad gradcheck --filter attention` (both wall-clock ms).
#
#   bench/busy.sh [path/to/tapegrad]        (default: build/tapegrad)
#   STEPS=10 LONG_STEPS=3 WARMUP=2 LM_STEPS=100 REPEAT=3 bench/busy.sh
#   LOADS="0 1 2"                the busy processes beside each command (default: all three)
#   ROWS="bench int8 sample gradcheck", WORKLOADS="textcls-small ...": a subset
#   TORCH2_PYTHON=/path/to/python: torch 2.x elsewhere than bench/.venv; SKIP_TORCH2=1: none
#
# Each figure is the fastest of REPEAT runs (fresh processes). Run it on an otherwise quiet
# machine: the script's own busy processes are the only load the table should see (it prints
# the load average before it starts).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tapegrad="${1:-$here/../build/tapegrad}"
corpus="$here/../data/corpus.txt"
steps="${STEPS:-10}"
long_steps="${LONG_STEPS:-3}"
warmup="${WARMUP:-2}"
lm_steps="${LM_STEPS:-100}"
repeat="${REPEAT:-3}"
loads="${LOADS:-0 1 2}"
rows="${ROWS:-bench int8 sample gradcheck}"
workloads="${WORKLOADS:-textcls-small textcls-mid timeseries attn-long charlm}"

[ -x "$tapegrad" ] || { echo "busy.sh: no tapegrad binary at $tapegrad (build first)" >&2; exit 2; }
command -v jq > /dev/null || { echo "busy.sh: needs jq" >&2; exit 2; }

# PyTorch 2.x, if there is one (its columns say n/a otherwise).
torch2=""
if [ "${SKIP_TORCH2:-0}" != 1 ]; then
  candidate="${TORCH2_PYTHON:-$here/.venv/bin/python}"
  if "$candidate" -c "import sys, torch; sys.exit(int(torch.__version__.split('.')[0]) < 2)" \
       2> /dev/null; then
    torch2="$candidate"
  fi
fi

work="$(mktemp -d)"
results="$work/results"
busy_pids=()
# Kills the busy processes this script started.
stop_busy() {
  local pid
  for pid in "${busy_pids[@]}"; do
    kill "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
  done
  busy_pids=()
}
trap 'stop_busy; rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts $1 busy processes (one core each).
start_busy() {
  local i
  for ((i = 0; i < $1; i++)); do
    yes > /dev/null &
    busy_pids+=($!)
  done
  sleep 0.5  # let the scheduler spread them
}

# The fastest of REPEAT runs of a command that prints one number (ms), or "n/a".
fastest() {
  local best="" value _
  for _ in $(seq "$repeat"); do
    value="$("$@")" || value=""
    [[ "$value" =~ ^[0-9.]+$ ]] || continue
    best="$(awk -v a="$best" -v b="$value" 'BEGIN { print (a == "" || b + 0 < a + 0) ? b : a }')"
  done
  echo "${best:-n/a}"
}

# The wall-clock milliseconds of a command (its output discarded).
wall_ms() {
  local start end
  start="$(date +%s%N)"
  "$@" > /dev/null 2>&1 || return 1
  end="$(date +%s%N)"
  awk -v ns="$((end - start))" 'BEGIN { printf "%.1f", ns / 1e6 }'
}

# The ways to run each row at a thread count ("" for the default): each prints ms.
threads_flag() { if [ -n "$1" ]; then echo "--threads $1"; fi; }
bench_ms() {  # workload threads
  local n="$steps"
  [ "$1" = attn-long ] && n="$long_steps"
  # shellcheck disable=SC2046
  "$tapegrad" bench --workload "$1" $(threads_flag "$2") --steps "$n" --warmup "$warmup" --json |
    jq '.ms_per_step'
}
int8_ms() {  # threads
  # shellcheck disable=SC2046
  "$tapegrad" bench --workload textcls-mid --int8 $(threads_flag "$1") --steps "$steps" \
    --warmup "$warmup" --json | jq -s 'map(select(.model == "int8 dynamic"))[0].ms_per_batch'
}
sample_ms() {  # threads
  # shellcheck disable=SC2046
  wall_ms "$tapegrad" sample --load "$work/lm.safetensors" --prompt "The " --tokens 300 \
    $(threads_flag "$1")
}
gradcheck_ms() {  # threads
  # shellcheck disable=SC2046
  wall_ms "$tapegrad" gradcheck --filter attention $(threads_flag "$1")
}
torch_ms() {  # workload threads (0: torch's default)
  local n="$steps" attention=()
  [ "$1" = attn-long ] && n="$long_steps"
  [ "$1" = charlm ] && attention=(--attention sdpa)  # as bench/run.sh: is_causal SDPA
  "$torch2" "$here/torch_ref.py" --workload "$1" --threads "$2" --steps "$n" --warmup "$warmup" \
    "${attention[@]}" --json | jq '.ms_per_step'
}

# One row: name, load, then tapegrad at the default and at 1 thread, torch 2.x likewise (or n/a).
measure_row() {
  local name="$1" load="$2" kind="$3" workload="${4:-}"
  local tg_default tg_one t2_default="n/a" t2_one="n/a"
  case "$kind" in
    bench)
      tg_default="$(fastest bench_ms "$workload" "")"
      tg_one="$(fastest bench_ms "$workload" 1)"
      if [ -n "$torch2" ]; then
        t2_default="$(fastest torch_ms "$workload" 0)"
        t2_one="$(fastest torch_ms "$workload" 1)"
      fi
      ;;
    *)
      tg_default="$(fastest "${kind}_ms" "")"
      tg_one="$(fastest "${kind}_ms" 1)"
      ;;
  esac
  echo "$name|$load|$tg_default|$tg_one|$t2_default|$t2_one" >> "$results"
  echo "busy.sh: $name, $load busy: $tg_default / $tg_one ms (torch 2.x $t2_default / $t2_one)" >&2
}

echo "busy.sh: load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if [[ " $rows " == *" sample "* ]]; then  # the char LM that sample reads
  "$tapegrad" train --task charlm --data "$corpus" --context 64 --layers 2 --steps "$lm_steps" \
    --warmup 10 --threads 1 --save "$work/lm.safetensors" > "$work/train.log" 2>&1 ||
    { cat "$work/train.log" >&2; exit 2; }
fi
for load in $loads; do
  start_busy "$load"
  for row in $rows; do
    case "$row" in
      bench) for w in $workloads; do measure_row "bench $w" "$load" bench "$w"; done ;;
      int8) measure_row "bench textcls-mid --int8 (dynamic)" "$load" int8 ;;
      sample) measure_row "sample --tokens 300" "$load" sample ;;
      gradcheck) measure_row "gradcheck --filter attention" "$load" gradcheck ;;
      *) echo "busy.sh: unknown row '$row' (bench int8 sample gradcheck)" >&2; exit 2 ;;
    esac
  done
  stop_busy
done

default_threads="$("$tapegrad" info | sed -n 's/^threads: *//p')"
torch_version="$(if [ -n "$torch2" ]; then "$torch2" -c "import torch; print(torch.__version__)"; \
                 else echo "none"; fi)"
echo "tapegrad default threads: $default_threads"
echo "PyTorch 2.x: $torch_version; cores: $(nproc); fastest of $repeat runs each"
echo
echo "| command | busy processes | tapegrad default ms | tapegrad --threads 1 ms |" \
  "default / 1 thread | torch 2.x default ms | torch 2.x 1 thread ms | torch default / 1 thread |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
awk -F'|' '
  function ratio(a, b) {
    return (a == "n/a" || b == "n/a" || b + 0 == 0) ? "n/a" : sprintf("%.2fx", a / b)
  }
  function ms(a) { return a == "n/a" ? a : sprintf("%.2f", a) }
  {
    printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, ms($3), ms($4), ratio($3, $4),
           ms($5), ms($6), ratio($5, $6)
    if ($3 != "n/a" && $4 != "n/a" && $3 / $4 > 1.3) {
      over = over "\n  " $1 " beside " $2 " busy: " ratio($3, $4)
    }
  }
  END {
    print ""
    if (over == "") print "bound met: at the default threads every row is within 1.3x of --threads 1"
    else print "bound NOT met (default / 1 thread > 1.3x):" over
  }' "$results"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
