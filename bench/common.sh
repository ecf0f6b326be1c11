# shellcheck shell=bash
# Sourced by bench/generate.sh, bench/int8.sh and bench/gemm_shapes.sh: the programs they run, the
# checks before a run and the file their runs go to. The sourcing script's first argument, if any,
# is the tapegrad binary.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tapegrad="${1:-$here/../build/tapegrad}"
python="${PYTHON:-/usr/bin/python3}"                   # PyTorch 1.13 (Debian's)
torch2="${TORCH2_PYTHON:-$here/.venv/bin/python}"      # PyTorch 2.x (bench/run.sh creates the venv)

# Exits with 2 and one line, naming the script ($1), when the binary, jq or either PyTorch is
# missing.
check_programs() {
  local script="$1"
  [ -x "$tapegrad" ] ||
    { echo "$script: no tapegrad binary at $tapegrad (build first)" >&2; exit 2; }
  command -v jq > /dev/null || { echo "$script: needs jq" >&2; exit 2; }
  "$python" -c "import torch" 2>/dev/null || { echo "$script: $python has no torch" >&2; exit 2; }
  "$torch2" -c "import torch" 2>/dev/null ||
    { echo "$script: $torch2 has no torch (run bench/run.sh once)" >&2; exit 2; }
}

# The runs' JSON lines, in a temporary file removed when the script exits.
results="$(mktemp)"
trap 'rm -f "$results"' EXIT

# keep FRAMEWORK [FIELD VALUE]: a run's JSON lines (stdin) into $results, tagged with the framework
# and, when given, FIELD set to VALUE.
keep() {
  jq -c --arg framework "$1" --arg field "${2:-}" --arg value "${3:-}" \
    '. + {framework: $framework} + (if $field == "" then {} else {($field): $value} end)' \
    >> "$results"
}
