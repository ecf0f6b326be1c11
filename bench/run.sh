#!/usr/bin/env bash
# Runs `tapegrad bench` and bench/torch_ref.py on every workload at 1 and 2 threads, under two
# PyTorch builds, and prints markdown tables: every configuration, each framework at its best
# thread count, and sgemm at n=1024 (the machine's GEMM peak, for the fraction tapegrad reaches).
#
# PyTorch 1.13 is Debian's python3-torch (PYTHON, default /usr/bin/python3) on the system
# OpenBLAS. It runs twice: with OpenBLAS pinned to the same thread count ("threads" means the same
# for both frameworks), and with OpenBLAS at its default of every core (torch.set_num_threads
# alone does not reach OpenBLAS's pool: torch "at 1 thread" then runs its GEMMs on all cores).
# Its best-of column takes the faster of the two.
#
# PyTorch 2.x is the PyPI wheel (MKL + oneDNN) in bench/.venv, which this script creates on first
# use (python3 -m venv, then pip install torch numpy: several GB, downloaded once; the build and
# the tests never need it). MKL and oneDNN run on torch's OpenMP pool, which set_num_threads
# sizes, so 2.x runs once per thread count. On attn-long it also runs its fused attention,
# F.scaled_dot_product_attention (SDPA), the counterpart of tapegrad's fused path; on charlm
# (the character LM, causal) 2.x runs SDPA only: its fused causal attention is what a PyTorch
# user runs.
#
#   bench/run.sh [path/to/tapegrad]        (default: build/tapegrad)
#   STEPS=20 LONG_STEPS=5 WARMUP=3 THREADS="1 2" REPEAT=1 PYTHON=/usr/bin/python3 bench/run.sh
#   WORKLOADS="textcls-mid timeseries": a subset (default: all five)
#   (LONG_STEPS: the timed steps of attn-long, whose explicit path takes seconds a step)
#   TORCH2_PYTHON=/path/to/python: an interpreter that has torch 2.x, instead of bench/.venv
#   SKIP_TORCH2=1: PyTorch 1.13 only (the 2.x columns say n/a)
#
# Timings are medians over STEPS steps; with REPEAT=n the whole sweep runs n times (every
# configuration once a round, in fresh processes) and each configuration's fastest median counts.
# On a shared machine,
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
skip_torch2="${SKIP_TORCH2:-0}"
workloads="${WORKLOADS:-textcls-small textcls-mid timeseries attn-long charlm}"

[ -x "$tapegrad" ] || { echo "run.sh: no tapegrad binary at $tapegrad (build first)" >&2; exit 2; }
"$python" -c "import torch" 2>/dev/null || { echo "run.sh: $python has no torch" >&2; exit 2; }

# PyTorch 2.x: TORCH2_PYTHON, or bench/.venv (created, and torch installed, when missing).
has_torch2() { "$1" -c "import sys, torch; sys.exit(int(torch.__version__.split('.')[0]) < 2)" 2>/dev/null; }
torch2=""
if [ "$skip_torch2" != 1 ]; then
  if [ -n "${TORCH2_PYTHON:-}" ]; then
    torch2="$TORCH2_PYTHON"
  else
    venv="$here/.venv"
    torch2="$venv/bin/python"
    if ! has_torch2 "$torch2"; then
      echo "run.sh: installing PyTorch 2.x into $venv (once; several GB)" >&2
      if [ ! -x "$torch2" ]; then
        /usr/bin/python3 -m venv "$venv" ||
          { echo "run.sh: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 2; }
      fi
      "$torch2" -m pip install --progress-bar off torch numpy >&2
    fi
  fi
  has_torch2 "$torch2" || { echo "run.sh: $torch2 has no torch 2.x (or SKIP_TORCH2=1)" >&2; exit 2; }
fi

results="$(mktemp)"
sgemm="$(mktemp)"
raw="$(mktemp)"
trap 'rm -f "$results" "$sgemm" "$raw"' EXIT

# One run of a command printing one JSON line, kept under a key (configuration/threads/framework).
measure() {
  local key="$1"
  shift
  "$@" | jq -c --arg key "$key" '{key: $key, run: .}' >> "$raw"
}
torch2_measure() {  # the same for torch 2.x, unless it is skipped
  if [ -n "$torch2" ]; then measure "$1" "$torch2" "$here/torch_ref.py" "${@:2}"; fi
}
# The fastest run kept under a key, or null.
fastest() {
  jq -c -s --arg key "$1" '[.[] | select(.key == $key) | .run] | if length == 0 then null else min_by(.ms_per_step) end' "$raw"
}

# REPEAT rounds, each running every configuration once: the repeats of one configuration are
# minutes apart, so a burst of load from another tenant of the machine slows one of them, not all.
for _ in $(seq "$repeat"); do
  for threads in $threads_list; do  # sgemm, n=1024: tapegrad's, OpenBLAS through torch 1.13, MKL through 2.x
    args=(--workload sgemm --threads "$threads" --steps "$steps" --warmup "$warmup" --json)
    measure "sgemm/$threads/tapegrad" "$tapegrad" bench "${args[@]}"
    measure "sgemm/$threads/openblas" "$python" "$here/torch_ref.py" "${args[@]}"
    torch2_measure "sgemm/$threads/mkl" "${args[@]}"
  done
  for workload in $workloads; do
    for threads in $threads_list; do
      n="$steps"
      [ "$workload" = attn-long ] && n="$long_steps"
      args=(--workload "$workload" --threads "$threads" --steps "$n" --warmup "$warmup" --json)
      key="$workload/$threads"
      measure "$key/tg" "$tapegrad" bench "${args[@]}"
      measure "$key/th" "$python" "$here/torch_ref.py" "${args[@]}"
      measure "$key/tu" "$python" "$here/torch_ref.py" "${args[@]}" --blas-threads 0
      if [ "$workload" = charlm ]; then  # torch 2.x with is_causal SDPA (1.13: explicit)
        torch2_measure "$key/t2" "${args[@]}" --attention sdpa
      else
        torch2_measure "$key/t2" "${args[@]}"
      fi
      if [ "$workload" = attn-long ]; then  # fused vs SDPA, and the explicit paths (1.13 has no SDPA)
        torch2_measure "$key/sdpa" "${args[@]}" --attention sdpa
        measure "$key/tg-explicit" "$tapegrad" bench "${args[@]}" --path explicit
      fi
    done
  done
done

for threads in $threads_list; do
  jq -c -n --argjson own "$(fastest "sgemm/$threads/tapegrad")" --argjson ob "$(fastest "sgemm/$threads/openblas")" \
    --argjson mkl "$(fastest "sgemm/$threads/mkl")" '{threads: $ob.threads, tapegrad: $own, openblas: $ob, mkl: $mkl}' >> "$sgemm"
done
for workload in $workloads; do
  for threads in $threads_list; do
    key="$workload/$threads"
    tg="$(fastest "$key/tg")" th="$(fastest "$key/th")" tu="$(fastest "$key/tu")" t2="$(fastest "$key/t2")"
    if [ "$workload" = attn-long ]; then
      jq -c -n --argjson tg "$tg" --argjson th "$th" --argjson tu "$tu" --argjson t2 "$(fastest "$key/sdpa")" \
        '{name: $tg.workload, tg: $tg, th: $th, tu: $tu, t2: $t2}' >> "$results"
      jq -c -n --argjson tg "$(fastest "$key/tg-explicit")" --argjson th "$th" --argjson tu "$tu" --argjson t2 "$t2" \
        '{name: "attn-long (explicit)", tg: $tg, th: $th, tu: $tu, t2: $t2}' >> "$results"
    else
      jq -c -n --argjson tg "$tg" --argjson th "$th" --argjson tu "$tu" --argjson t2 "$t2" \
        '{name: $tg.workload, tg: $tg, th: $th, tu: $tu, t2: $t2}' >> "$results"
    fi
  done
done

# Formatting for the tables: a run's ms/step, a ratio of two runs, peak bytes; n/a where missing.
defs='def r2: . * 100 | round / 100;
  def ms: if . == null then "n/a" else "\(.ms_per_step | r2)" end;
  def ratio($slow; $fast): if $slow == null or $fast == null then "n/a"
    else "\($slow.ms_per_step / $fast.ms_per_step | r2)x" end;
  def peak: if . == null or .peak_bytes == null then "n/a" else "\(.peak_bytes)" end;
  def needed($tg; $t2; $top): if $t2 == null or $top == null then "n/a"
    else ($tg.gflops * $tg.ms_per_step / ($t2.ms_per_step / 2)) as $rate
      | "\($rate | round), \($rate / $top * 100 | round)%" end;'

torch2_version="$(if [ -n "$torch2" ]; then "$torch2" -c "import torch; print(torch.__version__)" 2>/dev/null; else echo "skipped"; fi)"
echo "PyTorch 1.13: $("$python" -c "import torch; print(torch.__version__)" 2>/dev/null) ($python, OpenBLAS);" \
  "PyTorch 2.x: $torch2_version${torch2:+ ($torch2, MKL + oneDNN)}"
echo
echo "| workload | threads | tapegrad ms/step | torch 1.13 ms/step | torch 1.13 ms/step, OpenBLAS unpinned | torch 2.x ms/step | speed-up vs 1.13 | speed-up vs 2.x | tapegrad GFLOP/s | tapegrad peak bytes | torch 1.13 peak bytes | torch 2.x peak bytes |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
jq -r "$defs"'"| \(.name) | \(.tg.threads) | \(.tg | ms) | \(.th | ms) | \(.tu | ms) | \(.t2 | ms) | \(ratio(.th; .tg)) | \(ratio(.t2; .tg)) | \(.tg.gflops * 10 | round / 10) | \(.tg | peak) | \(.th | peak) | \(.t2 | peak) |"' "$results"
echo
echo "attn-long: tapegrad's fused attention; its torch 2.x column is F.scaled_dot_product_attention"
echo "(SDPA, is_causal=True). torch 1.13 has no SDPA: its columns are the explicit path in both rows."
echo "charlm: torch 2.x runs SDPA (is_causal=True); torch 1.13 the explicit path."

echo
echo "Best thread count of each framework (torch 1.13: the faster of OpenBLAS pinned and unpinned):"
echo
echo "| workload | tapegrad best ms/step (threads) | PyTorch 1.13 best ms/step (threads) | PyTorch 2.x best ms/step (threads) | speed-up vs 2.x | tapegrad GFLOP/s, % of sgemm peak | GFLOP/s 2x needs, % of top peak |"
echo "|---|---:|---:|---:|---:|---:|---:|"
jq -r -s --slurpfile sg "$sgemm" "$defs"'. as $all | reduce (.[] | .name) as $n ([]; if index([$n]) then . else . + [$n] end) |
  .[] as $n | [$all[] | select(.name == $n)] | (min_by(.tg.ms_per_step)) as $t |
  ([.[] | .th, .tu] | min_by(.ms_per_step)) as $p |
  ([.[] | .t2 | select(. != null)] | min_by(.ms_per_step)) as $q |
  ([$sg[] | select(.threads == $t.tg.threads) | .tapegrad, .openblas, .mkl | select(. != null) | .gflops] | max) as $peak |
  ([$sg[] | .tapegrad, .openblas, .mkl | select(. != null) | .gflops] | max) as $top |
  "| \($t.name) | \($t.tg | ms) (\($t.tg.threads)) | \($p | ms) (\($p.threads), OpenBLAS \($p.blas_threads)) | \($q | ms)\(if $q == null then "" else " (\($q.threads))" end) | \(ratio($q; $t.tg)) | \($t.tg.gflops * 10 | round / 10), \(if $peak == null then "n/a" else "\($t.tg.gflops / $peak * 100 | round)%" end) | \(needed($t.tg; $q; $top)) |"' "$results"
echo
echo "attn-long: tapegrad fused vs torch 2.x SDPA (torch 1.13: explicit). The last column: the rate"
echo "tapegrad's counted products would need for a step half as long as PyTorch 2.x's best, were"
echo "the rest of the step free, against the run's fastest sgemm at any thread count. Above 100%,"
echo "2x is out of reach of any f32 product on this machine."

echo
echo "sgemm, n=1024 (C = A B in f32: \`tapegrad bench --workload sgemm\`, torch.mm). \"sgemm peak\""
echo "above is the fastest of the three at tapegrad's thread count:"
echo
echo "| threads | tapegrad sgemm GFLOP/s (OpenBLAS) | MKL sgemm GFLOP/s (torch 2.x) | OpenBLAS sgemm GFLOP/s (torch 1.13) |"
echo "|---:|---:|---:|---:|"
jq -r '"| \(.threads) | \(.tapegrad.gflops * 10 | round / 10) | \(if .mkl == null then "n/a" else (.mkl.gflops * 10 | round / 10) end) | \(.openblas.gflops * 10 | round / 10) |"' "$sgemm"

fused="$(jq -s '[.[] | select(.name == "attn-long")][0].tg.peak_bytes' "$results")"
explicit="$(jq -s '[.[] | select(.name == "attn-long (explicit)")][0].tg.peak_bytes' "$results")"
sdpa_peak="$(jq -r -s '[.[] | select(.name == "attn-long")][0].t2.peak_bytes // "n/a"' "$results")"
echo
if [ "$fused" != null ] && [ "$explicit" != null ]; then  # attn-long ran (WORKLOADS may leave it out)
  echo "attn-long peak bytes: fused $fused, explicit $explicit ($(jq -n "$explicit / $fused * 10 | round / 10")x less with the fused path); torch 2.x SDPA $sdpa_peak"
  echo
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
