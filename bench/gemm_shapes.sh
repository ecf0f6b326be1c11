#!/usr/bin/env bash
# The products of the training workloads, one at a time: `tapegrad bench --workload sgemm --shape
# MxKxN` (OpenBLAS, one call a thread) against bench/torch_ref.py --workload sgemm --shape MxKxN
# under PyTorch 2.x (MKL) and Debian's 1.13 (the system OpenBLAS, as tapegrad's). Prints one
# markdown table of GFLOP/s, the fastest median of REPEAT rounds: how much of a workload's gap to
# PyTorch 2.x is its BLAS's, before any of tapegrad's own code runs.
#
#   bench/gemm_shapes.sh [path/to/tapegrad]      (default: build/tapegrad)
#   REPEAT=5 STEPS=20 THREADS="1 2" SHAPES="4096x128x512 2048x256x768" bench/gemm_shapes.sh
#
# The default shapes are forward products, C = A B (a Linear's x W^T, with W^T given as B):
# textcls-mid's and attn-long's q, k, v projection, charlm's MLP (up and down), q, k, v and head,
# and the 1024^3 yardstick. Every configuration runs once a round, in fresh processes.
set -euo pipefail

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

repeat="${REPEAT:-5}"
steps="${STEPS:-20}"
threads_list="${THREADS:-1}"
default_shapes="2048x256x768 2048x768x256 4096x128x512 4096x512x128 4096x128x384 4096x128x100"
shapes="${SHAPES:-$default_shapes 1024x1024x1024}"

check_programs gemm_shapes.sh

for round in $(seq "$repeat"); do
  for shape in $shapes; do
    for threads in $threads_list; do
      common=(--workload sgemm --shape "$shape" --threads "$threads" --steps "$steps" --json)
      "$tapegrad" bench "${common[@]}" | keep tapegrad shape "$shape"
      "$torch2" "$here/torch_ref.py" "${common[@]}" | keep torch2 shape "$shape"
      "$python" "$here/torch_ref.py" "${common[@]}" | keep torch1 shape "$shape"
    done
  done
  echo "gemm_shapes.sh: round $round of $repeat done" >&2
done

echo "| M x K x N | threads | tapegrad (OpenBLAS) | PyTorch 2.x (MKL) | PyTorch 1.13 (OpenBLAS) | MKL / tapegrad |"
echo "|---|---:|---:|---:|---:|---:|"
jq -r -s '
  def r1: . * 10 | round / 10;
  def best(f): [.[] | select(.framework == f)] | max_by(.gflops);
  group_by([.shape, .threads])[] |
  best("tapegrad") as $t | best("torch2") as $m | best("torch1") as $o |
  "| \($t.shape) | \($t.threads) | \($t.gflops | r1) | \($m.gflops | r1) | \($o.gflops | r1) | \($m.gflops / $t.gflops | . * 100 | round / 100)x |"' "$results"
echo
echo "GFLOP/s: each configuration's fastest median of REPEAT=$repeat rounds;" \
  "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
