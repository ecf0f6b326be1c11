#!/usr/bin/env bash
# The generation table: `tapegrad bench --workload generate` (greedy decoding, batch 1, the charlm
# workload's model, with and without the KV cache, contexts 128, 512 and 2048) against
# bench/torch_ref.py --workload generate (the same model, an eager loop with its own KV cache
# under torch.inference_mode(), the same window policy) under PyTorch 2.x (SDPA) and Debian's
# 1.13 (explicit attention: it has no SDPA), each at 1 and 2 threads. Prints one markdown table:
# each framework at its best thread count, tokens per second, and tapegrad's peak bytes.
#
#   bench/generate.sh [path/to/tapegrad]      (default: build/tapegrad)
#   REPEAT=3 STEPS=3 THREADS="1 2" CONTEXTS="128 512 2048" bench/generate.sh
#
# Every configuration runs once a round, REPEAT rounds, in fresh processes; the fastest counts.
# PyTorch 2.x comes from bench/.venv (bench/run.sh creates it) or TORCH2_PYTHON.
set -euo pipefail

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

repeat="${REPEAT:-3}"
steps="${STEPS:-3}"
threads_list="${THREADS:-1 2}"
contexts="${CONTEXTS:-128 512 2048}"
largest="$(echo "$contexts" | tr ' ' '\n' | sort -n | tail -1)"

check_programs generate.sh

for round in $(seq "$repeat"); do
  for threads in $threads_list; do
    "$tapegrad" bench --workload generate --threads "$threads" --steps "$steps" --max-seq "$largest" --json |
      keep tapegrad
    for context in $contexts; do
      "$torch2" "$here/torch_ref.py" --workload generate --attention sdpa --threads "$threads" \
        --steps "$steps" --warmup 1 --context "$context" --json | keep torch2
      "$python" "$here/torch_ref.py" --workload generate --threads "$threads" --steps "$steps" \
        --warmup 1 --context "$context" --json | keep torch1
    done
  done
  echo "generate.sh: round $round of $repeat done" >&2
done

echo "| context (new tokens) | tapegrad cached tok/s (threads) | tapegrad uncached tok/s | cached / uncached | PyTorch 2.x cached tok/s (threads) | PyTorch 1.13 cached tok/s (threads) | vs 2.x | vs 1.13 | tapegrad peak bytes |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
jq -r -s '
  def best(f): [.[] | select(.framework == f)] | max_by(.tokens_per_s);
  def r1: . * 10 | round / 10;
  group_by(.context)[] |
  best("tapegrad") as $t | best("torch2") as $p | best("torch1") as $o |
  ([.[] | select(.framework == "tapegrad") | .uncached_tokens_per_s | select(. != null)] | max) as $u |
  "| \($t.context) (\($t.new_tokens)) | \($t.tokens_per_s | r1) (\($t.threads)) | \(if $u == null then "-" else ($u | r1) end) | \(if $u == null then "-" else "\($t.tokens_per_s / $u | r1)x" end) | \(if $p == null then "n/a" else "\($p.tokens_per_s | r1) (\($p.threads))" end) | \(if $o == null then "n/a" else "\($o.tokens_per_s | r1) (\($o.threads))" end) | \(if $p == null then "n/a" else "\($t.tokens_per_s / $p.tokens_per_s * 100 | round / 100)x" end) | \(if $o == null then "n/a" else "\($t.tokens_per_s / $o.tokens_per_s * 100 | round / 100)x" end) | \($t.peak_bytes) |"' "$results"
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
