#!/usr/bin/env bash
# gRPC clients for the NO_PROXY differential tests (internal/noproxy): the
# ends of each gRPC model row. grpc-go: test/clients/grpcgo built against
# each release (Go module proxy) into $EGRET_CACHE/noproxy-grpc/grpcgo-<v>;
# grpc-js: the releases pinned by test/clients/grpc/package-lock.json in
# $EGRET_CACHE/noproxy-grpc/node_modules (reinstalled when the lock file
# changes); gRPC C-core: Debian's python3-grpcio.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/apt.sh
apt_install python3-grpcio
src="$PWD/test/clients"
dir="${EGRET_CACHE:-$HOME/.cache/egret}/noproxy-grpc"
mkdir -p "$dir"
for v in 1.74.2 1.85.0; do
  [ -x "$dir/grpcgo-$v" ] && continue
  tmp=$(mktemp -d)
  cp "$src/grpcgo/main.go" "$src/grpcgo/go.mod" "$src/grpcgo/go.sum" "$tmp/"
  (cd "$tmp" && go mod edit -require="google.golang.org/grpc@v$v" &&
    GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$dir/grpcgo-$v.tmp" .)
  mv "$dir/grpcgo-$v.tmp" "$dir/grpcgo-$v"
  rm -rf "$tmp"
done
stamp=$(sha256sum "$src/grpc/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$dir/.lock-sha256" 2>/dev/null)" != "$stamp" ] || [ ! -d "$dir/node_modules" ]; then
  cp "$src/grpc/package.json" "$src/grpc/package-lock.json" "$dir/"
  rm -f "$dir/.lock-sha256"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$stamp" >"$dir/.lock-sha256"
fi
