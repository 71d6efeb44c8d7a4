#!/usr/bin/env bash
# bench-deps.sh: install the proxies tools/bench measures egret against, idempotently.
# Not part of `make test`: `make bench-compare` runs it.
#
#   Debian packages  squid, tinyproxy, trafficserver (Apache Traffic Server 9.2)
#   Go module        github.com/stripe/smokescreen, built into ${EGRET_CACHE:-~/.cache/egret}/bench
#   Debian package   squid-openssl (Squid with ssl-bump, for the intercept tests), unpacked into
#                    ${EGRET_CACHE:-~/.cache/egret}/bench/squid-openssl, not installed: it conflicts with the
#                    squid package the test suite uses; it shares squid's squid-common files
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
sq="$cache/squid-openssl"
if [ ! -x "$sq/usr/sbin/squid" ]; then
  echo "bench-deps: unpacking Debian's squid-openssl into $sq" >&2
  tmp=$(mktemp -d) && chmod 755 "$tmp" # apt downloads as _apt
  if ! (cd "$tmp" && flock /tmp/apt.lock apt-get download -qq squid-openssl >&2); then
    flock /tmp/apt.lock apt-get update -qq >&2
    (cd "$tmp" && flock /tmp/apt.lock apt-get download -qq squid-openssl >&2)
  fi
  mkdir -p "$sq"
  dpkg-deb -x "$tmp"/squid-openssl_*.deb "$sq"
  rm -rf "$tmp"
fi
echo "$bin"
