#!/usr/bin/env bash
# bench-compare.sh [plain|gateway] [proxybench flags]: the outside referee, ../shared/bench/compare.sh,
# on egret (`make bench-referee`). tools/bench (`make bench-compare`) is the project's own harness and
# must agree with it. With no configuration named, two runs: egret with the sidecar defaults, then egret
# with scripts/bench-gateway.yaml. The referee asks for its origin as 127.0.0.1, a loopback literal, so
# there the gateway's rules are not walked (loopback is direct before any rule) and the SSRF guard has to
# open 127.0.0.1/32 itself, the gateway's own address; tools/bench asks the gateway by name instead.
# EGRET_REFEREE names another copy of compare.sh. Smokescreen comes from scripts/bench-deps.sh. Skipped, with a message, when the referee is not there.
set -euo pipefail
cd "$(dirname "$0")/.."
referee=${EGRET_REFEREE:-../shared/bench/compare.sh} # relative to the repository
if [ ! -x "$referee" ]; then
  echo "bench-compare.sh: $referee not found: nothing to referee with (make bench-compare runs tools/bench)" >&2
  exit 0
fi
configs=(plain gateway)
case ${1:-} in
  plain | gateway) configs=("$1"); shift ;;
esac
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-tests http,setup,bulk,idle -idle 5000 -rounds 3)
SMOKESCREEN=${SMOKESCREEN:-$(./scripts/bench-deps.sh)}
export SMOKESCREEN
for c in "${configs[@]}"; do
  eargs="--admin-listen 127.0.0.1:0"
  [ "$c" = gateway ] && eargs+=" --config scripts/bench-gateway.yaml --ssrf-allow-cidrs 127.0.0.1/32"
  echo "== referee: egret $c: $referee -e ./bin/egret -a \"$eargs\" -- ${args[*]}" >&2
  "$referee" -e ./bin/egret -a "$eargs" -- "${args[@]}"
done
