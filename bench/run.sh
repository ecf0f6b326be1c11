#!/usr/bin/env bash
# Runs `tapegrad bench` and bench/torch_ref.py on every workload at 1 and 2 threads and prints a
# markdown table (plus the best thread count of each framework per workload).
#
# torch runs twice: with OpenBLAS pinned to the same thread count ("threads" means the same for
# both frameworks), and with OpenBLAS at its default of every core (torch.set_num_threads alone
# does not reach OpenBLAS's pool: torch "at 1 thread" then runs its GEMMs on all cores). The
# best-of table takes the faster of the two.
#
#   bench/run.sh [path/to/tapegrad]        (default: build/tapegrad)
#   STEPS=20 LONG_STEPS=5 WARMUP=3 THREADS="1 2" REPEAT=1 PYTHON=/usr/bin/python3 bench/run.sh
#   (LONG_STEPS: the timed steps of attn-long, whose explicit path takes seconds a step)
#
# Timings are medians over STEPS steps; with REPEAT=n each configuration runs n times (fresh
# processes) and the fastest median counts. On a shared machine,
# check the load average printed at the end: other processes on the 2 cores make both
# frameworks slower, unevenly, and multi-threaded runs far slower.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tapegrad="${1:-$here/../build/tapegrad}"
python="${PYTHON:-/usr/bin/python3}"
steps="${STEPS:-20}"
long_steps="${LONG_STEPS:-5}"
warmup="${WARMUP:-3}"
threads_list="${THREADS:-1 2}"
repeat="${REPEAT:-1}"
workloads="textcls-small textcls-mid timeseries attn-long"

[ -x "$tapegrad" ] || { echo "run.sh: no tapegrad binary at $tapegrad (build first)" >&2; exit 2; }
"$python" -c "import torch" 2>/dev/null || { echo "run.sh: $python has no torch" >&2; exit 2; }

results="$(mktemp)"
trap 'rm -f "$results"' EXIT

# The fastest of $repeat runs of a command printing one JSON line.
fastest() {
  for _ in $(seq "$repeat"); do "$@"; done | jq -c -s 'min_by(.ms_per_step)'
}

for workload in $workloads; do
  for threads in $threads_list; do
    n="$steps"
    [ "$workload" = attn-long ] && n="$long_steps"
    args=(--workload "$workload" --threads "$threads" --steps "$n" --warmup "$warmup" --json)
    tg="$(fastest "$tapegrad" bench "${args[@]}")"
    th="$(fastest "$python" "$here/torch_ref.py" "${args[@]}")"
    tu="$(fastest "$python" "$here/torch_ref.py" "${args[@]}" --blas-threads 0)"
    jq -c -n --argjson tg "$tg" --argjson th "$th" --argjson tu "$tu" \
      '{name: $tg.workload, tg: $tg, th: $th, tu: $tu}' >> "$results"
    if [ "$workload" = attn-long ]; then  # the explicit path too: the memory the fused path saves
      tg="$(fastest "$tapegrad" bench "${args[@]}" --path explicit)"
      jq -c -n --argjson tg "$tg" --argjson th "$th" --argjson tu "$tu" \
        '{name: "attn-long (explicit)", tg: $tg, th: $th, tu: $tu}' >> "$results"
    fi
  done
done

echo "| workload | threads | tapegrad ms/step | torch ms/step | speed-up | torch ms/step, OpenBLAS unpinned | tapegrad GFLOP/s | tapegrad peak bytes | torch peak bytes |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
jq -r '"| \(.name) | \(.tg.threads) | \(.tg.ms_per_step * 100 | round / 100) | \(.th.ms_per_step * 100 | round / 100) | \(.th.ms_per_step / .tg.ms_per_step * 100 | round / 100)x | \(.tu.ms_per_step * 100 | round / 100) | \(.tg.gflops * 10 | round / 10) | \(.tg.peak_bytes) | \(.th.peak_bytes // "n/a") |"' "$results"

echo
echo "Best thread count of each framework:"
echo
echo "| workload | tapegrad best ms/step (threads) | torch best ms/step (threads) | speed-up |"
echo "|---|---:|---:|---:|"
jq -r -s 'group_by(.name)[] | (min_by(.tg.ms_per_step)) as $t |
  ([.[] | .th, .tu] | min_by(.ms_per_step)) as $p |
  "| \($t.name) | \($t.tg.ms_per_step * 100 | round / 100) (\($t.tg.threads)) | \($p.ms_per_step * 100 | round / 100) (\($p.threads), OpenBLAS \($p.blas_threads)) | \($p.ms_per_step / $t.tg.ms_per_step * 100 | round / 100)x |"' "$results"

fused="$(jq -s '[.[] | select(.name == "attn-long")][0].tg.peak_bytes' "$results")"
explicit="$(jq -s '[.[] | select(.name == "attn-long (explicit)")][0].tg.peak_bytes' "$results")"
echo
echo "attn-long peak bytes: fused $fused, explicit $explicit ($(jq -n "$explicit / $fused * 10 | round / 10")x less with the fused path)"
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
