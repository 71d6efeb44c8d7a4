#!/usr/bin/env bash
# bench-deps.sh: install the proxies tools/bench measures egret against, idempotently.
# Not part of `make test`: `make bench-compare` runs it.
#
#   Debian packages  squid, tinyproxy, trafficserver (Apache Traffic Server 9.2)
#   Go module        github.com/stripe/smokescreen, built into ${EGRET_CACHE:-~/.cache/egret}/bench
#
# Prints the Smokescreen binary's path on stdout. The harness starts every proxy itself, on
# loopback ports of its own with its own configuration: a packaged service that Debian starts on
# install (squid on 3128, trafficserver on 8080) is left alone and not used.
set -euo pipefail
cd "$(dirname "$0")/.."

smokescreen_version=v0.1.0
pkgs=(squid tinyproxy trafficserver)

. scripts/apt.sh
apt_install "${pkgs[@]}"

cache=${EGRET_CACHE:-$HOME/.cache/egret}/bench
bin="$cache/smokescreen-$smokescreen_version"
if [ ! -x "$bin" ]; then
  echo "bench-deps: building github.com/stripe/smokescreen@$smokescreen_version" >&2
  mkdir -p "$cache/gobin"
  GOBIN="$cache/gobin" go install "github.com/stripe/smokescreen@$smokescreen_version" >&2
  mv "$cache/gobin/smokescreen" "$bin"
fi
echo "$bin"
