#!/usr/bin/env bash
# The shared rate-limit tests (internal/ratelimit, internal/policy): the real
# envoyproxy/ratelimit service, built from source with tools/ratelimit/go.mod
# (the Go module proxy serves it; pinned by go.sum) into a cache, and
# redis-server, its store, from Debian:
#   $EGRET_CACHE/ratelimit/<version>/ratelimit   (EGRET_CACHE defaults to ~/.cache/egret)
# Skips what is present. Measured on 2 shared cores: about 3 min for a cold
# build (module downloads and an empty build cache), 0 s when cached.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v redis-server >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  # Other scripts and people share the machine: one apt-get at a time.
  $SUDO flock /tmp/apt.lock apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO flock /tmp/apt.lock apt-get install -y -qq --no-install-recommends redis-server >/dev/null
fi
version="$(sed -n 's/^\tgithub.com\/envoyproxy\/ratelimit \([^ ]*\).*/\1/p' tools/ratelimit/go.mod)"
dir="${EGRET_CACHE:-$HOME/.cache/egret}/ratelimit/$version"
[ -x "$dir/ratelimit" ] && exit 0
GO="${GO:-go}"
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "building envoyproxy/ratelimit $version into $dir (a few minutes, once)" >&2
start=$(date +%s)
(
  cd tools/ratelimit
  CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" "$GO" build -trimpath -ldflags '-s -w' \
    -o "$tmp/ratelimit" github.com/envoyproxy/ratelimit/src/service_cmd
)
mv -f "$tmp/ratelimit" "$dir/"
echo "ratelimit ready in $dir after $(( $(date +%s) - start ))s" >&2
