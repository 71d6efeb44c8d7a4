#!/usr/bin/env bash
# Squid with ssl-bump (Debian's squid-openssl) for the tests of a corporate
# proxy that intercepts TLS (internal/testutil/squid, Options.Bump; the real
# node's TestHelmTrustBehindSslBump). Unpacked into
# $EGRET_CACHE/bench/squid-openssl, not installed: it conflicts with the
# squid package the other tests use (10-apt.sh), whose squid-common files it
# shares. The same directory scripts/bench-deps.sh fills for the benchmarks;
# skipped when present. The version is what the archive serves (recorded in
# the directory's VERSION file), never a pin an archive can drop.
set -euo pipefail
sq="${EGRET_CACHE:-$HOME/.cache/egret}/bench/squid-openssl"
[ -x "$sq/usr/sbin/squid" ] && [ -x "$sq/usr/lib/squid/security_file_certgen" ] && exit 0
tmp=$(mktemp -d) && chmod 755 "$tmp" # apt downloads as _apt
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && flock /tmp/apt.lock apt-get download -qq squid-openssl >&2); then
  flock /tmp/apt.lock apt-get update -qq >&2
  (cd "$tmp" && flock /tmp/apt.lock apt-get download -qq squid-openssl >&2)
fi
mkdir -p "$sq"
dpkg-deb -x "$tmp"/squid-openssl_*.deb "$sq"
dpkg-deb -f "$tmp"/squid-openssl_*.deb Version >"$sq/VERSION"
