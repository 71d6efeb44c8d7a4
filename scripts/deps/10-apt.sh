#!/usr/bin/env bash
# Debian packages used by the tests: real upstream proxies (squid + htpasswd),
# real clients (curl, wget, python3-requests), iptables, chromium for the
# status page test, tinyproxy and wrk for benchmarks.
set -euo pipefail
pkgs=(squid apache2-utils tinyproxy iptables iproute2 curl wget python3-requests chromium wrk)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts squid and tinyproxy as services; the tests start their own.
for s in squid tinyproxy; do $SUDO systemctl stop "$s" 2>/dev/null || $SUDO service "$s" stop 2>/dev/null || true; done
pkill -x squid 2>/dev/null || true
pkill -x tinyproxy 2>/dev/null || true
