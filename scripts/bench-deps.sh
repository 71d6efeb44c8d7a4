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

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench-deps: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  # One apt-get at a time on a shared machine.
  $SUDO flock /tmp/apt.lock apt-get update -qq
  $SUDO flock /tmp/apt.lock env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cache=${EGRET_CACHE:-$HOME/.cache/egret}/bench
bin="$cache/smokescreen-$smokescreen_version"
if [ ! -x "$bin" ]; then
  echo "bench-deps: building github.com/stripe/smokescreen@$smokescreen_version" >&2
  mkdir -p "$cache/gobin"
  GOBIN="$cache/gobin" go install "github.com/stripe/smokescreen@$smokescreen_version" >&2
  mv "$cache/gobin/smokescreen" "$bin"
fi
echo "$bin"
