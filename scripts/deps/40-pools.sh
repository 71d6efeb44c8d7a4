#!/usr/bin/env bash
# Tools for the upstream-pool tests: a real SOCKS5 server with
# username/password authentication (microsocks) as a pool member. Squid,
# htpasswd, curl and chromium come from 10-apt.sh.
set -euo pipefail
command -v microsocks >/dev/null 2>&1 && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends microsocks >/dev/null
