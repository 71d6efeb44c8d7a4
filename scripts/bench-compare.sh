#!/usr/bin/env bash
# bench-compare.sh [proxybench flags]: egret beside Squid, tinyproxy and Smokescreen,
# using ../shared/bench/compare.sh. Smokescreen is built from the Go module proxy
# into a cache directory when it is not there yet.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${EGRET_CACHE:-$HOME/.cache/egret}
mkdir -p "$cache"
if [ -z "${SMOKESCREEN:-}" ]; then
  if [ ! -x "$cache/smokescreen" ]; then
    GOBIN="$cache" go install github.com/stripe/smokescreen@v0.1.0 >&2 || echo "smokescreen not built; left out" >&2
  fi
  [ -x "$cache/smokescreen" ] && export SMOKESCREEN="$cache/smokescreen"
fi
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-tests http,setup,bulk,idle -idle 5000 -rounds 3)
exec ../shared/bench/compare.sh -e ./bin/egret -- "${args[@]}"
