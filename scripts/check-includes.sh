#!/usr/bin/env bash
# Checks the layering of the source tree (docs/architecture.md draws it): every project include
# "tapegrad/<folder>/..." must go from a folder to one the table below allows, and only cpu/fast/
# may include an intrinsics header (<immintrin.h>, <x86intrin.h>, <*mmintrin.h>, ...).
#
#   scripts/check-includes.sh   check every tracked (and new, not ignored) .cpp/.h/.cu/.cuh file;
#                               print file:line and the broken arrow, exit 1 on any
#
# Same-directory includes ("attention_item.h") are not project includes here: the folder's own.
set -euo pipefail
cd "$(dirname "$0")/.."

# Which folders each folder may include, bottom to top (its own folder always). `*`: anything.
# runtime/ (the engine's plumbing) is the engine's layer too: autograd/ and runtime/ include each
# other, and every folder that may include autograd/ may include runtime/.
declare -A allowed=(
  [autograd]="runtime"
  [runtime]="autograd"
  [cpu]="autograd runtime cpu/fast"
  [cpu/fast]="autograd runtime cpu"
  [cuda]="autograd runtime"
  [ops]="autograd runtime"
  [io]="autograd runtime"
  [nn]="autograd runtime ops io"
  [distributed]="autograd runtime"
  [train]="autograd runtime ops nn io distributed"
  [analysis]="autograd runtime ops nn train"
  [plot]="autograd runtime io"
  [cli]="autograd runtime cpu cpu/fast cuda ops io nn distributed train analysis plot tapegrad.h"
  [tapegrad.h]="autograd runtime ops nn io"
  [tests]="*"
  [examples]="*"
  [docs/examples]="*"
)

# Sets `folder` to the folder a path belongs to: its top-level folder, except cpu/fast/ and
# docs/examples/, which are layers of their own, and the umbrella header tapegrad.h at the root.
folder_of() {
  case "$1" in
    cpu/fast/*) folder=cpu/fast ;;
    docs/examples/*) folder=docs/examples ;;
    */*) folder=${1%%/*} ;;
    *) folder=$1 ;;
  esac
}

# May folder $1 include folder $2?
may_include() {
  local from=$1 to=$2 rules=${allowed[$1]}
  [[ "$from" == "$to" || "$rules" == "*" ]] && return 0
  [[ "$to" == tests ]] && return 1  # test helpers: for tests/ only, never installed
  [[ " $rules " == *" $to "* ]]
}

broken=0
# Prints one broken rule and counts it.
report() {
  echo "$1" >&2
  broken=$((broken + 1))
}

# The files: tracked ones, and new ones not yet added (deleted ones, still in the index, skipped).
files=()
while IFS= read -r file; do
  [[ -f "$file" ]] && files+=("$file")
done < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.h' '*.cu' '*.cuh' |
         sort -u)

# Every file must sit in a folder the table knows.
for file in "${files[@]}"; do
  folder_of "$file"
  [[ -n "${allowed[$folder]+known}" ]] ||
    report "$file: the folder $folder/ is not in scripts/check-includes.sh's table (add it)"
done

include='^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]'
# Every include line of every file, as file:line:text.
while IFS=: read -r file line text; do
  folder_of "$file"
  from=$folder
  [[ -n "${allowed[$from]+known}" ]] || continue  # reported above
  [[ "$text" =~ $include([^\"\>]*) ]] || continue
  target=${BASH_REMATCH[1]}
  if [[ "$target" =~ (^|/)[a-z0-9_]*intrin\.h$ ]]; then
    [[ "$from" == cpu/fast ]] ||
      report "$file:$line: $from -> <$target>: intrinsics only in cpu/fast/"
    continue
  fi
  case "$target" in
    tapegrad/tapegrad.h) to=tapegrad.h ;;
    tapegrad/*/*) folder_of "${target#tapegrad/}"; to=$folder ;;
    tests/*) to=tests ;;
    *) continue ;;  # a system, third-party or same-directory header
  esac
  if [[ -z "${allowed[$to]+known}" ]]; then
    report "$file:$line: $from -> $to: no such folder in the table ($target)"
  elif ! may_include "$from" "$to"; then
    report "$file:$line: $from -> $to: not allowed ($target)"
  fi
done < <(grep -nHE "$include" -- "${files[@]}" || true)

if ((broken > 0)); then
  echo "$broken broken rule(s) of the layering (the table: docs/architecture.md)" >&2
  exit 1
fi
echo "includes follow the layering: ${#files[@]} files checked"
