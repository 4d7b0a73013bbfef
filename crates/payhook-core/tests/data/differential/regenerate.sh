#!/usr/bin/env bash
# Regenerates ../signature_differential.json: header variants judged by Stripe's
# official verifiers, the npm `stripe` and PyPI `stripe` packages at the pinned
# versions below, installed into a temporary directory. Needs node, npm and
# python3 with venv; nothing else is changed. The Rust test
# (tests/integration/signature_differential.rs) reads only the fixture.
set -euo pipefail

NODE_STRIPE=23.1.0
PYTHON_STRIPE=16.1.0

here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm install --silent --no-audit --no-fund "stripe@$NODE_STRIPE" >&2)
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet "stripe==$PYTHON_STRIPE" >&2

"$work/venv/bin/python" "$here/generate.py" cases > "$work/cases.json"
NODE_PATH="$work/node_modules" node "$here/node_verdicts.js" < "$work/cases.json" > "$work/node.json"
"$work/venv/bin/python" "$here/generate.py" fixture "$work/cases.json" "$work/node.json" \
    "{\"npm stripe\":\"$NODE_STRIPE\",\"PyPI stripe\":\"$PYTHON_STRIPE\"}" \
    > "$here/../signature_differential.json"
echo "wrote $here/../signature_differential.json" >&2
