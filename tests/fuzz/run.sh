#!/usr/bin/env bash
# Runs the libFuzzer targets of a TAPEGRAD_FUZZ=ON build (see README.md here); CI calls it.
#
#   tests/fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET] [ARTIFACT_DIR]
#       Fuzzes each target for SECONDS_PER_TARGET (default 60) on a copy of its seed corpus
#       tests/fuzz/corpus/<target>/ (the committed corpus never grows), with its dictionary
#       tests/fuzz/<name>.dict when there is one. Crash, leak, timeout and out-of-memory
#       reproducers go to ARTIFACT_DIR (default BUILD_DIR/fuzz-artifacts), logs next to them.
#   tests/fuzz/run.sh --regress BUILD_DIR
#       Runs each target once on every reproducer in tests/fuzz/crashes/<target>/.
#
# Exit status: 0 when nothing crashed, 1 when a target did (its reproducer's path is printed),
# 2 for bad arguments or a missing target.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
usage() {
  echo "usage: $0 BUILD_DIR [SECONDS_PER_TARGET] [ARTIFACT_DIR]" >&2
  echo "       $0 --regress BUILD_DIR" >&2
  exit 2
}

regress=0
if [[ "${1:-}" == "--regress" ]]; then regress=1; shift; fi
[[ $# -ge 1 ]] || usage
build="$1"
seconds="${2:-60}"
[[ "$seconds" =~ ^[0-9]+$ ]] || usage

# The targets are the fuzz_*.cpp sources; each builds to BUILD_DIR/tests/fuzz/<target>.
targets=()
for source in "$here"/fuzz_*.cpp; do targets+=("$(basename "$source" .cpp)"); done
for target in "${targets[@]}"; do
  if [[ ! -x "$build/tests/fuzz/$target" ]]; then
    echo "missing $build/tests/fuzz/$target: build with -DTAPEGRAD_FUZZ=ON, then --target fuzz" >&2
    exit 2
  fi
done

# One thread each (the targets set the library's own count to 1, fuzz_support.h; OpenBLAS would
# otherwise start a pool per core), the scratch files on a RAM disk when there is one
# (save_safetensors syncs every file it writes), and a stack for every UBSan report.
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
if [[ -z "${TMPDIR:-}" && -d /dev/shm && -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

status=0

if [[ $regress == 1 ]]; then
  for target in "${targets[@]}"; do
    reproducers=()
    for file in "$here/crashes/$target"/*; do
      [[ -f "$file" && "$(basename "$file")" != README* ]] && reproducers+=("$file")
    done
    [[ ${#reproducers[@]} -gt 0 ]] || { echo "$target: no reproducers"; continue; }
    if "$build/tests/fuzz/$target" -timeout=10 -rss_limit_mb=2048 "${reproducers[@]}" > /dev/null 2>&1; then
      echo "$target: ${#reproducers[@]} reproducers pass"
    else
      echo "$target: a reproducer in $here/crashes/$target/ still fails; to see which:" >&2
      echo "  $build/tests/fuzz/$target $here/crashes/$target/*" >&2
      status=1
    fi
  done
  exit $status
fi

artifacts="${3:-$build/fuzz-artifacts}"
mkdir -p "$artifacts"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for target in "${targets[@]}"; do
  corpus="$work/$target"
  mkdir -p "$corpus"
  [[ -d "$here/corpus/$target" ]] && cp -R "$here/corpus/$target/." "$corpus/"
  options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
           -artifact_prefix="$artifacts/$target-")
  dict="$here/${target#fuzz_}.dict"
  [[ -f "$dict" ]] && options+=(-dict="$dict")
  log="$artifacts/$target.log"
  touch "$work/$target.start"  # the reproducers of this run are the files newer than this
  echo "== $target: ${seconds}s, log $log"
  "$build/tests/fuzz/$target" "${options[@]}" "$corpus" > "$log" 2>&1
  code=$?
  # The last status line: coverage, corpus size, executions per second.
  grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -n 1
  if [[ $code != 0 ]]; then
    status=1
    echo "$target FAILED (exit code $code):" >&2
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error:|fuzz:|==[0-9]+== ERROR: libFuzzer)' "$log" | head -n 5 >&2
    find "$artifacts" -maxdepth 1 -type f -name "$target-*" -newer "$work/$target.start" |
      while read -r reproducer; do
        echo "  reproducer: $reproducer" >&2
        echo "  rerun with: $build/tests/fuzz/$target $reproducer" >&2
      done
  fi
done
exit $status
