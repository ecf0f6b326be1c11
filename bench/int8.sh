#!/usr/bin/env bash
# The int8 table: `tapegrad bench --workload W --int8` (the eval forward in f32, int8 dynamic and
# int8 static, interleaved) against bench/torch_ref.py --workload W --int8 (the same models in
# f32 and after torch.ao.quantization.quantize_dynamic({nn.Linear}, qint8)) under PyTorch 2.x
# and Debian's 1.13, on textcls-mid and charlm. Each runs twice: on what this CPU has, and as an
# AVX2-only CPU runs it (tapegrad: TAPEGRAD_MAX_CPU_ISA=avx2 and OpenBLAS's Haswell kernels;
# PyTorch: FBGEMM, ATen and MKL held to AVX2). Prints one markdown table, ms per batch, the
# fastest median of REPEAT rounds at each thread count.
#
#   bench/int8.sh [path/to/tapegrad]      (default: build/tapegrad)
#   REPEAT=3 STEPS=20 THREADS="1" WORKLOADS="textcls-mid charlm" PATHS="native avx2" bench/int8.sh
#
# Every configuration runs once a round, in fresh processes, tapegrad and PyTorch back to back.
# PyTorch 2.x comes from bench/.venv (bench/run.sh creates it) or TORCH2_PYTHON, and runs its
# fused scaled_dot_product_attention (1.13 has none and writes attention out).
set -euo pipefail

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

repeat="${REPEAT:-3}"
steps="${STEPS:-20}"
threads_list="${THREADS:-1}"
workloads="${WORKLOADS:-textcls-mid charlm}"
paths="${PATHS:-native avx2}"

check_programs int8.sh
for path in $paths; do
  case "$path" in
    native | avx2) ;;
    *) echo "int8.sh: unknown path '$path' (native, avx2)" >&2; exit 2 ;;
  esac
done

# The environment of a path, for tapegrad and for PyTorch.
set_path_env() {
  tapegrad_env=()
  torch_env=()
  if [ "$1" = avx2 ]; then
    tapegrad_env=(TAPEGRAD_MAX_CPU_ISA=avx2 OPENBLAS_CORETYPE=Haswell)
    torch_env=(FBGEMM_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
               OPENBLAS_CORETYPE=Haswell)
  fi
}

for round in $(seq "$repeat"); do
  for workload in $workloads; do
    for path in $paths; do
      set_path_env "$path"
      for threads in $threads_list; do
        common=(--workload "$workload" --int8 --threads "$threads" --steps "$steps" --json)
        env "${tapegrad_env[@]}" "$tapegrad" bench "${common[@]}" | keep tapegrad path "$path"
        env "${torch_env[@]}" "$torch2" "$here/torch_ref.py" "${common[@]}" --attention sdpa |
          keep torch2 path "$path"
        env "${torch_env[@]}" "$python" "$here/torch_ref.py" "${common[@]}" |
          keep torch1 path "$path"
      done
    done
  done
  echo "int8.sh: round $round of $repeat done" >&2
done

echo "| workload | path | threads | tapegrad int8 kernels | tapegrad f32 | int8 dynamic | int8 static | dynamic vs f32 | loss change (dynamic) | PyTorch 2.x f32 | PyTorch 2.x int8 dynamic | PyTorch 1.13 int8 dynamic | tapegrad int8 vs PyTorch 2.x int8 |"
echo "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
jq -r -s '
  def r2: . * 100 | round / 100;
  def ms(f; m): [.[] | select(.framework == f and .model == m)] | min_by(.ms_per_batch);
  group_by([.workload, .path, .threads])[] |
  ms("tapegrad"; "f32") as $f | ms("tapegrad"; "int8 dynamic") as $d | ms("tapegrad"; "int8 static") as $s |
  ms("torch2"; "f32") as $pf | ms("torch2"; "int8 dynamic") as $pd | ms("torch1"; "int8 dynamic") as $od |
  "| \($f.workload) | \($f.path) | \($f.threads) | \($d.int8_kernels) | \($f.ms_per_batch | r2) | \($d.ms_per_batch | r2) | \($s.ms_per_batch | r2) | \($f.ms_per_batch / $d.ms_per_batch | r2)x | \($d.loss_change * 100 | . * 1000 | round / 1000)% | \($pf.ms_per_batch | r2) | \($pd.ms_per_batch | r2) | \($od.ms_per_batch | r2) | \($pd.ms_per_batch / $d.ms_per_batch | r2)x |"' "$results"
echo
echo "ms per batch: each configuration's fastest median of REPEAT=$repeat rounds; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
