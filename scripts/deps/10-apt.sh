#!/usr/bin/env bash
# Debian packages used by the tests: real upstream proxies (squid + htpasswd),
# real clients (curl, wget, python3-requests), iptables, chromium for the
# status page test, tinyproxy and wrk for benchmarks.
#
# The tests start their own squid and tinyproxy, on free ports with their own
# configuration. Debian's packages would also start the system's instances
# from their maintainer scripts (invoke-rc.d), which then hold :3128 (egret's
# default port, used by the quick start and the benchmarks) and :8888. So
# this install forbids those starts with a policy-rc.d that refuses only
# squid and tinyproxy, and disables their start at boot. It never stops or
# kills anything already running: a squid that runs here belongs to someone.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/apt.sh
apt_install_quiet "squid tinyproxy" squid apache2-utils tinyproxy iptables iproute2 curl wget python3-requests chromium wrk
