#!/usr/bin/env bash
# The Markdown pages cite code with line links whose text names what they point at:
#   [`name` path:line](../path#Lline)                  a definition
#   [`name` path:first-last](../path#Lfirst-Llast)     a definition and its whole body
#   [`Class::name` path:line](../path#Lline)           a member of Class
# The cited line must be the definition of `name` (tests/docs/test_doc_definitions.cpp says
# exactly what counts as one), not merely a line that mentions it. This script finds each such
# definition in the file the link names and rewrites the line numbers to where it is now, so that
# following a code move is one command:
#
#   scripts/doc-links.sh             print every line link and where its definition is
#   scripts/doc-links.sh --check     exit 1, naming each link that is not on its definition
#   scripts/doc-links.sh --update    rewrite the stale links' numbers in place
#
# A link whose number no longer lands on the definition moves to the definition of the name in the
# same file nearest its old line (an overloaded name has several). A name with no definition left
# in the file (it moved to another file, or was renamed) is an error: fix that link by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

# The pages checked (tests/docs/test_doc_links.cpp checks the same ones): docs/*.md and these.
pages() {
  local page
  for page in README.md cpu/README.md data/README.md bench/RESULTS.md tests/fuzz/README.md \
    docs/*.md; do
    [[ -f "$page" ]] && echo "$page"
  done
  return 0
}

# "first last" of every definition of NAME (CLASS::NAME when CLASS is given) in FILE, one a line:
# the line that defines it and the line its definition ends on (its closing brace, or the
# semicolon of a definition without a body).
readonly definitions_awk='
function is_ident(c) { return c ~ /^[A-Za-z0-9_]$/ }
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
# The identifier that ends s ("" when s does not end with one).
function last_word(s,    i) {
  for (i = length(s); i > 0 && is_ident(substr(s, i, 1)); --i) {}
  return substr(s, i + 1)
}
# Parentheses of s balance (never closing one it did not open, none left open).
function balanced(s,    i, c, depth) {
  depth = 0
  for (i = 1; i <= length(s); ++i) {
    c = substr(s, i, 1)
    if (c == "(") ++depth
    else if (c == ")" && --depth < 0) return 0
  }
  return depth == 0
}
# Blanks out string and character literals and comments, so that no later scan sees a brace or a
# parenthesis in them. Block comments carry over lines in `in_comment`.
function code_of(line,    out, i, c, quote) {
  out = ""
  for (i = 1; i <= length(line); ++i) {
    c = substr(line, i, 1)
    if (in_comment) {
      if (substr(line, i, 2) == "*/") { in_comment = 0; ++i; out = out "  " } else out = out " "
      continue
    }
    if (substr(line, i, 2) == "//") break
    if (substr(line, i, 2) == "/*") { in_comment = 1; ++i; out = out "  "; continue }
    if (c == "\"" || (c == "'\''" && !is_ident(substr(line, i - 1, 1)))) {
      quote = c; out = out c
      for (++i; i <= length(line) && substr(line, i, 1) != quote; ++i) {
        if (substr(line, i, 1) == "\\") ++i
        out = out " "
      }
      out = out quote
      continue
    }
    out = out c
  }
  return out
}
# After the "(" at column `at` of line k: "{" when a body follows the parameter list (a
# definition), ";" when the statement ends first (a declaration), "" for anything else (a call
# inside an expression).
function after_parameters(k, at,    line, i, c, depth) {
  depth = 0
  for (; k <= n && k < start_line + 40; ++k) {
    line = code[k]
    for (i = at; i <= length(line); ++i) {
      c = substr(line, i, 1)
      if (c == "(" || (depth > 0 && c == "{")) ++depth
      else if (c == ")" || (depth > 0 && c == "}")) { if (--depth < 0) return "" }
      else if (depth == 0 && (c == "{" || c == ";")) return c
      else if (depth == 0 && c == ",") return ""
    }
    at = 1
  }
  return ""
}
# The line on which the definition starting at line k ends: its body'\''s closing brace, or the
# semicolon before any body. Braces inside parentheses before the body (default arguments) are
# not the body.
function end_of(k,    line, i, c, parens, depth, opened) {
  parens = 0; depth = 0; opened = 0
  for (; k <= n; ++k) {
    line = code[k]
    for (i = 1; i <= length(line); ++i) {
      c = substr(line, i, 1)
      if (c == "(") ++parens
      else if (c == ")") --parens
      else if (c == "{" && (opened || parens == 0)) { ++depth; opened = 1 }
      else if (c == "}" && (opened || parens == 0)) { if (--depth == 0 && opened) return k }
      else if (c == ";" && !opened && depth == 0 && parens == 0) return k
    }
  }
  return n
}
# Whether line k defines `name`; sets `qualifier` to the Class of a Class::name it defines.
function defines(k, name,    line, from, at, pos, after, head, word, rest) {
  line = code[k]
  qualifier = ""
  if (line ~ /^[ \t]*#[ \t]*define[ \t]/) {
    rest = line; sub(/^[ \t]*#[ \t]*define[ \t]+/, "", rest)
    return index(rest, name) == 1 && !is_ident(substr(rest, length(name) + 1, 1))
  }
  for (from = 1; (at = index(substr(line, from), name)) > 0; from += at) {
    pos = from + at - 1
    after = substr(line, pos + length(name))
    if (is_ident(substr(after, 1, 1))) continue
    if (pos > 1 && is_ident(substr(line, pos - 1, 1)) && is_ident(substr(name, 1, 1))) continue
    head = substr(line, 1, pos - 1); qualifier = ""
    while (head ~ /::$/) {  # ns::Class::name: the class is the last qualifier
      head = substr(head, 1, length(head) - 2)
      word = last_word(head)
      if (qualifier == "") qualifier = word
      head = substr(head, 1, length(head) - length(word))
    }
    head = trim(head); rest = trim(after); word = last_word(head)
    if (head ~ /(\.|->)$/) continue
    # A type, an alias, a namespace: struct Name {, using Name = ..., typedef ... Name;
    if (word ~ /^(class|struct|union|enum|namespace)$/ && head !~ /^(friend|typedef)[ \t]/) {
      if (rest !~ /^;/ || index(line, "{") > 0) return 1
      continue
    }
    if (word == "using") { if (rest ~ /^=/) return 1; continue }
    if (line ~ /^[ \t]*typedef[ \t]/ && rest ~ /^;/) return 1
    # A function or a variable is preceded by its type (a constructor by its Class::).
    if (word ~ /^(return|else|new|delete|throw|case|goto|co_return|co_yield|co_await|sizeof)$/ ||
        word ~ /^(using|typedef|friend|operator)$/) continue
    typed = head ~ /[A-Za-z0-9_>*&]$/ && balanced(head)
    if (rest ~ /^\(/) {
      if (!typed && !(head == "" && qualifier != "")) continue
      if (after_parameters(k, pos + length(name) + index(after, "(") - 1) == "{") return 1
      continue
    }
    if (typed && rest ~ /^(;|=[^=]|=$|\{|\[)/ && trim(line) !~ /,$/ &&
        balanced("(" after ")")) return 1
  }
  return 0
}
{ raw[NR] = $0 }
END {
  n = NR
  for (k = 1; k <= n; ++k) code[k] = code_of(raw[k])
  # The bodies of Class, for a member defined inside its class.
  bodies = 0
  if (class != "") {
    for (k = 1; k <= n; ++k) {
      start_line = k
      if (code[k] ~ ("(class|struct)[ \t]+([A-Za-z_][A-Za-z0-9_]*[ \t]+)?" class "([^A-Za-z0-9_]|$)") &&
          defines(k, class)) { body_first[++bodies] = k; body_last[bodies] = end_of(k) }
    }
  }
  for (k = 1; k <= n; ++k) {
    start_line = k
    if (!defines(k, name)) continue
    if (class != "" && qualifier != class) {
      inside = 0
      for (b = 1; b <= bodies; ++b) inside = inside || (body_first[b] < k && k <= body_last[b])
      if (qualifier != "" || !inside) continue
    }
    print k, end_of(k)
  }
}'

definitions() {
  local file=$1 class=$2 name=$3
  awk -v class="$class" -v name="$name" "$definitions_awk" "$file"
}

# The line links of a page outside fenced code, as "line<TAB>link".
line_links() {
  awk '
    /^[ \t]*```/ { fenced = !fenced; next }
    fenced { next }
    {
      rest = $0
      while (match(rest, /\[[^]]*\]\([^)]*#L[0-9][^)]*\)/)) {
        print NR "\t" substr(rest, RSTART, RLENGTH)
        rest = substr(rest, RSTART + RLENGTH)
      }
    }' "$1"
}

# "path" normalised: a/b/../c -> a/c, ./a -> a.
normalise() {
  local part out=()
  local IFS=/
  for part in $1; do
    case "$part" in
      "" | .) ;;
      ..) ((${#out[@]} > 0)) && unset 'out[${#out[@]}-1]' ;;
      *) out+=("$part") ;;
    esac
  done
  echo "${out[*]}"
}

mode=${1:-}
case "$mode" in
  "" | --check | --update) ;;
  *) echo "usage: $0 [--check | --update]" >&2; exit 2 ;;
esac

errors=0 stale=0 links=0
link_pattern='^\[`(([A-Za-z_][A-Za-z0-9_]*::)*)(~?[A-Za-z_][A-Za-z0-9_]*)(\(\))?` ([^]:]+):([0-9]+)(-([0-9]+))?\]\(([^)#]+)#L([0-9]+)(-L([0-9]+))?\)$'
while IFS= read -r page; do
  dir=$(dirname "$page")
  replacements=()
  while IFS=$'\t' read -r number link; do
    [[ -z "$link" ]] && continue
    links=$((links + 1))
    where="$page:$number: $link"
    if [[ ! "$link" =~ $link_pattern ]]; then
      echo "$where: a line link's text must read \`name\` path:line (or path:first-last)" >&2
      errors=$((errors + 1)); continue
    fi
    qualifiers=${BASH_REMATCH[1]} name=${BASH_REMATCH[3]} text_path=${BASH_REMATCH[5]}
    text_first=${BASH_REMATCH[6]} text_last=${BASH_REMATCH[8]} target=${BASH_REMATCH[9]}
    first=${BASH_REMATCH[10]} last=${BASH_REMATCH[12]}
    class=${qualifiers%::}; class=${class##*::}
    file=$(normalise "$dir/$target")
    if [[ ! -f "$file" ]]; then
      echo "$where: $file does not exist" >&2; errors=$((errors + 1)); continue
    fi
    if [[ "$text_path" != "$file" || "$text_first" != "$first" || "$text_last" != "$last" ]]; then
      echo "$where: the text must repeat the place the link points at, $file:$first${last:+-$last}" >&2
      errors=$((errors + 1)); continue
    fi
    mapfile -t found < <(definitions "$file" "$class" "$name")
    if ((${#found[@]} == 0)); then
      echo "$where: no definition of ${qualifiers}$name in $file" \
        "(moved to another file? fix the link by hand)" >&2
      errors=$((errors + 1)); continue
    fi
    best="" best_distance=-1
    for definition in "${found[@]}"; do
      read -r at end <<< "$definition"
      distance=$((at > first ? at - first : first - at))
      if ((best_distance < 0 || distance < best_distance)); then
        best=$definition best_distance=$distance
      fi
    done
    read -r new_first new_end <<< "$best"
    new_last=${last:+$new_end}
    [[ "$mode" == "" ]] && echo "$where -> $file:$new_first${new_last:+-$new_last}"
    [[ "$new_first" == "$first" && "$new_last" == "$last" ]] && continue
    stale=$((stale + 1))
    old_place="$file:$first${last:+-$last}](${target}#L$first${last:+-L$last})"
    new_place="$file:$new_first${new_last:+-$new_last}](${target}#L$new_first${new_last:+-L$new_last})"
    new_link=${link/"$old_place"/"$new_place"}
    [[ "$mode" == --check ]] && echo "$where: the definition is at $file:$new_first${new_last:+-$new_last}" >&2
    replacements+=("$link" "$new_link")
  done < <(line_links "$page")
  if [[ "$mode" == --update ]] && ((${#replacements[@]} > 0)); then
    for ((i = 0; i < ${#replacements[@]}; i += 2)); do
      old=${replacements[i]} new=${replacements[i + 1]}
      OLD=$old NEW=$new awk '
        BEGIN { old = ENVIRON["OLD"]; new = ENVIRON["NEW"] }
        { line = ""; rest = $0
          while ((at = index(rest, old)) > 0) {
            line = line substr(rest, 1, at - 1) new; rest = substr(rest, at + length(old))
          }
          print line rest }' "$page" > "$page.tmp"
      mv "$page.tmp" "$page"
    done
    echo "updated $page: $((${#replacements[@]} / 2)) line links"
  fi
done < <(pages)

if ((errors > 0)); then
  echo "$errors line links need fixing by hand" >&2
  exit 1
fi
case "$mode" in
  --check)
    if ((stale > 0)); then
      echo "$stale line links are stale: run scripts/doc-links.sh --update" >&2
      exit 1
    fi
    echo "every line link of the Markdown pages is on its definition ($links links)"
    ;;
  --update) echo "$links line links, $stale updated" ;;
esac
