#!/usr/bin/env bash
# The clients of the interception tests (internal/intercept) that the other
# steps do not install: httpx with HTTP/2 (Debian's python3-httpx and
# python3-h2, for /usr/bin/python3, which also has python3-requests), and
# the Node.js packages of test/intercept (undici, axios, https-proxy-agent),
# pinned by its package-lock.json and installed into
# $EGRET_CACHE/intercept-clients/node_modules, again only when the lock
# file changes. curl, the JDK, Go and Ruby come from the other steps.
set -euo pipefail
. "$(dirname "$0")/../apt.sh"
apt_install python3-httpx python3-h2
src="$(cd "$(dirname "$0")/../../test/intercept" && pwd)"
dir="${EGRET_CACHE:-$HOME/.cache/egret}/intercept-clients"
stamp=$(sha256sum "$src/package-lock.json" | cut -d' ' -f1)
[ "$(cat "$dir/.lock-sha256" 2>/dev/null)" = "$stamp" ] && [ -d "$dir/node_modules" ] && exit 0
mkdir -p "$dir"
cp "$src/package.json" "$src/package-lock.json" "$dir/"
rm -f "$dir/.lock-sha256"
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
echo "$stamp" >"$dir/.lock-sha256"
