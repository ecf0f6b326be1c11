#!/usr/bin/env bash
# The reading path of README.md's "Reading the source", with every length computed from the files:
# each step's lines (a whole file, or one function's definition), the path's total, the lines of
# the readable core, and the source files and lines of every folder.
#
#   scripts/reading-path.sh             print them
#   scripts/reading-path.sh --markdown  print README.md's block, ready to paste (with its markers)
#   scripts/reading-path.sh --update    write that block into README.md in place
#   scripts/reading-path.sh --check     exit 1, with a diff, when README.md's block differs (CI)
set -euo pipefail
cd "$(dirname "$0")/.."

readonly readme=README.md
readonly begin_marker='<!-- begin: scripts/reading-path.sh --markdown (do not edit by hand) -->'
readonly end_marker='<!-- end: scripts/reading-path.sh --markdown -->'
readonly lines_an_hour=400  # careful reading of dense code and prose, for the estimate

# The path, in order: file, definition (a function, struct or class; empty: the whole file), what
# the step is. An afternoon's reading: keep the total at or under 1,600 lines.
steps=(
  "docs/engine.md||one training step through the engine, linked to the lines it cites"
  "autograd/tensor.h|TensorImpl|a tensor: a view over shared storage, and its two autograd fields"
  "autograd/tape.h||the tape's records: Node and Edge, record(), grad mode, backward()"
  "autograd/tape.cpp||the tape: recording, backward(), gradient reduction and accumulation"
  "ops/softmax.cpp||one op: its forward and backward side by side, the derivative in a comment"
  "ops/matmul.cpp||matmul and linear, straight to the GEMM kernel"
  "nn/attention.cpp|explicit_attention|attention written with the ops above"
  "cpu/reference.cpp|Attention|the plain attention kernel as loops, the formulas beside them"
  "cpu/optim.cpp|adam_step|Adam as Kingma & Ba write it (m-hat, v-hat), AdamW's decay before it"
  "autograd/checkpoint.cpp||gradient checkpointing: forget the activations, recompute in backward"
)
# Printed after the total and not counted in it: for the curious.
appendix=(
  "cpu/fast/attention.cpp||the plain kernel's fast twin: tiles, online softmax in base 2, the backward fused"
)

# The readable core: whole folders (cpu/ without cpu/fast/) and nn/'s core modules.
core_folders=(autograd ops cpu)
core_nn_modules=(module layers attention optim masks positional_encoding)
# The engine's plumbing, beside the core and not part of it: the thread count and the pool, the
# CPU allocator's cache, the profiler and the engine's seam for tools, autocast, the backend
# registry, the fast-path switch.
plumbing_folders=(runtime)

# The folders whose source files are counted, in layer order, then the tests and examples.
folders=(autograd runtime cpu cpu/fast cuda ops io nn distributed train analysis plot cli tests examples docs/examples)

# ---- Counting ------------------------------------------------------------------------------------

# The tracked (and new, not ignored) C++ and CUDA sources, one a line.
source_files() {
  git ls-files --cached --others --exclude-standard -- '*.cpp' '*.h' '*.cu' '*.cuh' |
    sort -u | while IFS= read -r file; do [[ -f "$file" ]] && echo "$file"; done
}
mapfile -t all_sources < <(source_files)

# The lines of the given files together (0 for none).
lines_of() {
  (($# == 0)) && { echo 0; return; }
  cat -- "$@" | wc -l | tr -d ' '
}

# "first last" of a definition in a file, a function's or a struct's or class's: from the line that
# names it (column 0, not a declaration; a function's starts with its return type) to the next
# closing brace in column 0.
function_range() {
  awk -v name="$2" '
    !first && ($0 ~ "^[A-Za-z].*[^A-Za-z0-9_]" name "\\(" ||
               $0 ~ "^(struct|class) " name "([^A-Za-z0-9_]|$)") && $0 !~ /;[[:space:]]*$/ { first = NR }
    first && /^}/ { print first, NR; exit }
  ' "$1"
}

# 1234567 -> 1,234,567
with_commas() { sed -E ':a; s/([0-9])([0-9]{3})($|[^0-9])/\1,\2\3/; ta' <<< "$1"; }

# The source files of a folder: its own, and for cpu/ not those of cpu/fast/.
folder_sources() {
  local folder=$1 file
  for file in "${all_sources[@]}"; do
    [[ "$file" == "$folder"/* ]] || continue
    [[ "$folder" == cpu && "$file" == cpu/fast/* ]] && continue
    echo "$file"
  done
}

# ---- The numbers ---------------------------------------------------------------------------------

# One step, "file|definition|what": sets label, link and lines (exits when it is not there).
measure_step() {
  local file definition
  IFS='|' read -r file definition what <<< "$1"
  if [[ ! -f "$file" ]]; then
    echo "reading path: $file is missing (edit scripts/reading-path.sh)" >&2
    exit 1
  fi
  if [[ -z "$definition" ]]; then
    lines=$(lines_of "$file")
    label=$file link=$file
  else
    local first last
    read -r first last <<< "$(function_range "$file" "$definition")"
    if [[ -z "${last:-}" ]]; then
      echo "reading path: no definition of $definition in $file" >&2
      exit 1
    fi
    lines=$((last - first + 1))
    label="\`$definition\` $file:$first-$last" link="$file#L$first-L$last"
  fi
}

step_label=() step_link=() step_lines=() step_what=()
path_total=0
for step in "${steps[@]}"; do
  measure_step "$step"
  step_label+=("$label") step_link+=("$link") step_lines+=("$lines") step_what+=("$what")
  path_total=$((path_total + lines))
done
hours=$(((path_total + lines_an_hour / 2) / lines_an_hour))
appendix_label=() appendix_link=() appendix_lines=() appendix_what=()
for step in "${appendix[@]}"; do
  measure_step "$step"
  appendix_label+=("$label") appendix_link+=("$link") appendix_lines+=("$lines")
  appendix_what+=("$what")
done

core_files=()
for folder in "${core_folders[@]}"; do
  mapfile -t -O "${#core_files[@]}" core_files < <(folder_sources "$folder")
done
for module in "${core_nn_modules[@]}"; do
  for file in "nn/$module.h" "nn/$module.cpp"; do [[ -f "$file" ]] && core_files+=("$file"); done
done
core_lines=$(lines_of "${core_files[@]}")

plumbing_files=()
for folder in "${plumbing_folders[@]}"; do
  mapfile -t -O "${#plumbing_files[@]}" plumbing_files < <(folder_sources "$folder")
done
plumbing_lines=$(lines_of "${plumbing_files[@]}")

# The names the plumbing's headers declare at namespace scope (the project does not indent inside
# a namespace): classes and structs, functions, constants. One a line.
plumbing_names() {
  local file headers=()
  for file in "${plumbing_files[@]}"; do [[ "$file" == *.h ]] && headers+=("$file"); done
  ((${#headers[@]} > 0)) || return 0
  grep -hvE '^[[:space:]]*//|^(class|struct) [A-Za-z_][A-Za-z0-9_]*;' "${headers[@]}" |
    grep -oE '^(class|struct) [A-Za-z_][A-Za-z0-9_]*|^(inline )?constexpr .* [A-Za-z_][A-Za-z0-9_]* =|^[A-Za-z_][A-Za-z0-9_:<>,*& ]* [*&]?[a-z_][a-z0-9_]*\(' |
    sed -E 's/ =$//; s/\($//; s/.*[ *&]//' | sort -u || true
}

# The plumbing left in the core: its lines that include runtime/ or name what runtime/ declares
# (a parallel_for, an autocast cast, the observer's one call a seam). Lines, not statements: a
# call that spans two lines counts once, a comment that names the pool counts too.
plumbing_pattern=$(plumbing_names | paste -sd '|' -)
core_plumbing_lines=$(grep -hE -e 'tapegrad/runtime/' ${plumbing_pattern:+-e "\\b(${plumbing_pattern})\\b"} \
  -- "${core_files[@]}" | wc -l | tr -d ' ')
# a as a percentage of b, one decimal.
percent() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b > 0 ? 100 * a / b : 0) }'; }
core_plumbing_percent=$(percent "$core_plumbing_lines" "$core_lines")

folder_files=() folder_lines=()
for folder in "${folders[@]}"; do
  mapfile -t files < <(folder_sources "$folder")
  folder_files+=("${#files[@]}") folder_lines+=("$(lines_of "${files[@]}")")
done
library_files=0 library_lines=0
for i in "${!folders[@]}"; do
  case "${folders[$i]}" in tests | examples | docs/examples) continue ;; esac
  library_files=$((library_files + folder_files[i]))
  library_lines=$((library_lines + folder_lines[i]))
done

# ---- Output --------------------------------------------------------------------------------------

print_text() {
  echo "The reading path:"
  for i in "${!step_label[@]}"; do
    printf ' %2d. %-45s %6s lines  %s\n' $((i + 1)) "${step_label[$i]//\`/}" "${step_lines[$i]}" \
      "${step_what[$i]}"
  done
  printf '     %-45s %6s lines  (about %d hours at %d lines an hour)\n' "total" "$path_total" \
    "$hours" "$lines_an_hour"
  for i in "${!appendix_label[@]}"; do
    printf '  +  %-45s %6s lines  for the curious, not counted: %s\n' \
      "${appendix_label[$i]//\`/}" "${appendix_lines[$i]}" "${appendix_what[$i]}"
  done
  echo
  printf 'The readable core (%s, nn/{%s}): %d files, %s lines\n' \
    "$(printf '%s/ ' "${core_folders[@]}" | sed 's| $||; s|cpu/|cpu/ without cpu/fast/|')" \
    "$(IFS=,; echo "${core_nn_modules[*]}")" "${#core_files[@]}" "$core_lines"
  printf 'Beside it, the engine'"'"'s plumbing (%s): %d files, %s lines
' \
    "$(printf '%s/ ' "${plumbing_folders[@]}" | sed 's| $||')" "${#plumbing_files[@]}" \
    "$plumbing_lines"
  printf 'The core'"'"'s lines that reach into it (an include, or a name it declares): %s, %s%% of the core
' \
    "$core_plumbing_lines" "$core_plumbing_percent"
  echo
  echo "Source files (.cpp .h .cu .cuh) per folder:"
  for i in "${!folders[@]}"; do
    printf '  %-15s %4d files %7d lines\n' "${folders[$i]}/" "${folder_files[$i]}" \
      "${folder_lines[$i]}"
  done
  printf '  %-15s %4d files %7d lines\n' "all but tests/, examples/, docs/examples/" \
    "$library_files" "$library_lines"
}

print_markdown() {
  echo "$begin_marker"
  echo "| step | read | what it is | lines |"
  echo "|---:|---|---|---:|"
  for i in "${!step_label[@]}"; do
    echo "| $((i + 1)) | [${step_label[$i]}](${step_link[$i]}) | ${step_what[$i]} |" \
      "$(with_commas "${step_lines[$i]}") |"
  done
  echo "| | **the path** | about $hours hours at $lines_an_hour lines an hour |" \
    "**$(with_commas "$path_total")** |"
  for i in "${!appendix_label[@]}"; do
    echo "| for the curious | [${appendix_label[$i]}](${appendix_link[$i]}) |" \
      "${appendix_what[$i]} (not counted in the path) | $(with_commas "${appendix_lines[$i]}") |"
  done
  echo
  local modules
  modules=$(printf '`%s`, ' "${core_nn_modules[@]}")
  echo "The readable core, the textbook: autograd/, ops/, cpu/ without cpu/fast/, and nn/'s"
  echo "${modules%, }."
  echo "${#core_files[@]} files, $(with_commas "$core_lines") lines. Beside it, not in it, the engine's"
  echo "plumbing ($(printf '%s/ ' "${plumbing_folders[@]}" | sed 's| $||'): threads, the allocator's cache, the profiler, autocast, the backend"
  echo "registry, the fast-path switch): ${#plumbing_files[@]} files, $(with_commas "$plumbing_lines") lines; the core's lines that"
  echo "reach into it (an include, or a name it declares): $(with_commas "$core_plumbing_lines"), $core_plumbing_percent% of the core."
  echo "All the sources (.cpp, .h, .cu, .cuh):"
  echo
  echo "| folder | files | lines |"
  echo "|---|---:|---:|"
  for i in "${!folders[@]}"; do
    echo "| ${folders[$i]}/ | ${folder_files[$i]} | $(with_commas "${folder_lines[$i]}") |"
  done
  echo "| **all but tests/, examples/, docs/examples/** | **$library_files** |" \
    "**$(with_commas "$library_lines")** |"
  echo "$end_marker"
}

# README.md's block, markers included (nothing when it has none).
readme_block() {
  awk -v begin="$begin_marker" -v end="$end_marker" '
    $0 == begin { inside = 1 } inside { print } $0 == end { inside = 0 }' "$readme"
}

case "${1:-}" in
  "") print_text ;;
  --markdown) print_markdown ;;
  --check)
    if ! diff <(readme_block) <(print_markdown) > /dev/null; then
      echo "README.md's \"Reading the source\" numbers are stale (< README.md, > now):" >&2
      diff <(readme_block) <(print_markdown) >&2 || true
      echo "run scripts/reading-path.sh --update" >&2
      exit 1
    fi
    echo "README.md's reading path is current: $path_total lines"
    ;;
  --update)
    grep -qxF "$begin_marker" "$readme" && grep -qxF "$end_marker" "$readme" ||
      { echo "README.md has no block between the markers of scripts/reading-path.sh" >&2; exit 1; }
    block=$(print_markdown)
    awk -v begin="$begin_marker" -v end="$end_marker" -v block="$block" '
      $0 == begin { print block; skip = 1; next }
      skip && $0 == end { skip = 0; next }
      !skip { print }' "$readme" > "$readme.tmp"
    mv "$readme.tmp" "$readme"
    echo "updated README.md: the path is $path_total lines"
    ;;
  *) echo "usage: $0 [--markdown | --check | --update]" >&2; exit 2 ;;
esac
