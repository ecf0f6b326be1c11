#!/usr/bin/env bash
# Puts the project's own includes under the tapegrad/ prefix that installed headers have:
#   #include "autograd/tensor.h"  ->  #include "tapegrad/autograd/tensor.h"
# for the directories autograd/ runtime/ ops/ cpu/ nn/ io/ cuda/ train/ analysis/ plot/ cli/ distributed/ (quoted or angled), in every tracked C++,
# CUDA and Markdown file. Idempotent: re-run it after a merge brings unprefixed includes back.
# Includes of tests/ (test helpers, never installed) and same-directory includes stay as they are.
#
#   scripts/prefix-includes.sh          rewrite in place, print the files changed
#   scripts/prefix-includes.sh --check  rewrite nothing; list unprefixed includes, exit 1 if any
set -euo pipefail
cd "$(dirname "$0")/.."

pattern='^([[:space:]]*#[[:space:]]*include[[:space:]]*["<])(autograd|runtime|ops|cpu|nn|io|cuda|train|analysis|plot|cli|distributed)/'
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh' '*.md' | sort | while read -r f; do [[ -f "$f" ]] && echo "$f"; done)

if [[ "${1:-}" == "--check" ]]; then
  if grep -nE "$pattern" -- "${files[@]}"; then
    echo "unprefixed project includes (run scripts/prefix-includes.sh)" >&2
    exit 1
  fi
  exit 0
fi
[[ $# -eq 0 ]] || { echo "usage: $0 [--check]" >&2; exit 2; }

for file in "${files[@]}"; do
  if grep -qE "$pattern" -- "$file"; then
    sed -i -E "s@${pattern}@\\1tapegrad/\\2/@" -- "$file"
    echo "$file"
  fi
done
