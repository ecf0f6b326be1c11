#!/usr/bin/env bash
# Rebuilds the three data files of the toy tasks from Debian packages (see data/README.md):
#   sunspots.csv   yearly sunspot numbers 1700-2008      (python3-statsmodels)
#   fortunes.tsv   label<TAB>fortune, 4 categories        (fortunes)
#   corpus.txt     fortunes of 5 categories, as plain text (fortunes, fortunes-min)
# Installs the packages only when they are missing. The output depends only on the package
# contents: the same package versions give byte-identical files.
set -euo pipefail

DATA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATSMODELS_DIR=/usr/lib/python3/dist-packages/statsmodels/datasets
FORTUNES_DIR=/usr/share/games/fortunes

# ---- packages ------------------------------------------------------------------------------------
missing=()
for package in python3 python3-statsmodels fortunes fortunes-min; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get install -y "${missing[@]}" ||
    { "${sudo_cmd[@]}" apt-get update && "${sudo_cmd[@]}" apt-get install -y "${missing[@]}"; }
fi

export LC_ALL=C.UTF-8 PYTHONHASHSEED=0

python3 - "$DATA_DIR" "$STATSMODELS_DIR" "$FORTUNES_DIR" <<'PYTHON'
import csv, hashlib, math, re, sys
from pathlib import Path

data_dir, statsmodels_dir, fortunes_dir = map(Path, sys.argv[1:4])

# ---- sunspots.csv: the CSV as shipped, header unquoted, "\n" line ends -----------------------------
with open(statsmodels_dir / "sunspots" / "sunspots.csv", newline="", encoding="utf-8") as source:
    rows = [row for row in csv.reader(source) if row]
header, body = rows[0], rows[1:]
assert header == ["YEAR", "SUNACTIVITY"], header
for row in body:
    assert len(row) == 2 and all(math.isfinite(float(cell)) for cell in row), row
with open(data_dir / "sunspots.csv", "w", encoding="utf-8", newline="\n") as out:
    out.write(",".join(header) + "\n")
    for row in body:
        out.write(",".join(cell.strip() for cell in row) + "\n")

# ---- fortune files: "%" lines separate the fortunes ------------------------------------------------
def plain(text):
    # Some fortunes use teletype overstrike ("_\bA" underlines A, "'\bi" accents i): keep the
    # last character of each overstrike, then drop any other control character but tab/newline.
    while re.search(r"[^\x08]\x08", text):
        text = re.sub(r"[^\x08]\x08", "", text)
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", text)

def fortunes(category):
    text = plain((fortunes_dir / category).read_text(encoding="utf-8"))
    return [f for f in re.split(r"^%\n", text, flags=re.M) if f.strip()]

# ---- fortunes.tsv: label<TAB>text, whitespace collapsed, <= 300 characters ------------------------
CLASSES = ["computers", "science", "politics", "work"]
MAX_CHARS = 300
by_class = {c: [" ".join(f.split()) for f in fortunes(c)] for c in CLASSES}
by_class = {c: [t for t in texts if t and len(t) <= MAX_CHARS] for c, texts in by_class.items()}
# A text found in two categories (or twice in one) has no single label: keep none of its copies.
seen = {}
for c, texts in by_class.items():
    for t in texts:
        seen[t] = seen.get(t, 0) + 1
examples = [(c, t) for c, texts in by_class.items() for t in texts if seen[t] == 1]
# A deterministic shuffle that no library version can change: sort by a hash of the line.
examples.sort(key=lambda e: hashlib.sha256(f"{e[0]}\t{e[1]}".encode("utf-8")).hexdigest())
with open(data_dir / "fortunes.tsv", "w", encoding="utf-8", newline="\n") as out:
    for label, text in examples:
        out.write(f"{label}\t{text}\n")

# ---- corpus.txt: five other categories, line breaks kept, fortunes separated by a blank line -----
CORPUS = ["tao", "literature", "wisdom", "humorists", "songs-poems"]
pieces = []
for c in CORPUS:
    for f in fortunes(c):
        lines = [line.rstrip() for line in f.split("\n")]
        pieces.append("\n".join(lines).strip("\n"))
with open(data_dir / "corpus.txt", "w", encoding="utf-8", newline="\n") as out:
    out.write("\n\n".join(pieces) + "\n")

counts = {c: sum(1 for label, _ in examples if label == c) for c in CLASSES}
print(f"sunspots.csv: {len(body)} rows; fortunes.tsv: {len(examples)} lines {counts}; "
      f"corpus.txt: {len(pieces)} fortunes")
PYTHON

ls -l "$DATA_DIR"/sunspots.csv "$DATA_DIR"/fortunes.tsv "$DATA_DIR"/corpus.txt
