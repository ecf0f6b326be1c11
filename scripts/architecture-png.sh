#!/usr/bin/env bash
# Draws the layers of docs/architecture.md: docs/images/architecture.dot -> architecture.png.
# Re-run it after editing the .dot file (which must agree with scripts/check-includes.sh's table)
# and commit both. Needs Graphviz (`dot`; Debian: apt-get install graphviz).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v dot > /dev/null; then
  echo "dot not found: install Graphviz (apt-get install graphviz)" >&2
  exit 1
fi
dot -Tpng docs/images/architecture.dot -o docs/images/architecture.png
echo "wrote docs/images/architecture.png"
