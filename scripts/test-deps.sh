#!/usr/bin/env bash
# test-deps.sh: install what the test suite needs, idempotently. Each part lives in
# scripts/deps/NN-name.sh and is run in order; a part that finds its tools present
# does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each part's wall time is printed, so the README's cold and warm figures are
# measured (the CI log has them).
total=$SECONDS
for part in scripts/deps/*.sh; do
  echo "== test-deps: $part" >&2
  start=$SECONDS
  bash "$part"
  echo "== test-deps: $part done in $((SECONDS - start))s" >&2
done
echo "== test-deps: all parts done in $((SECONDS - total))s" >&2
