#!/usr/bin/env bash
# test-deps.sh: install what the test suite needs, idempotently. Each part lives in
# scripts/deps/NN-name.sh and is run in order; a part that finds its tools present
# does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
for part in scripts/deps/*.sh; do
  echo "== test-deps: $part" >&2
  bash "$part"
done
