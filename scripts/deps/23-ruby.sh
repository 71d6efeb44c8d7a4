#!/usr/bin/env bash
# Ruby (Debian 12: 3.1, with net-http and uri) for the NO_PROXY differential
# tests: Net::HTTP with its default :ENV proxy (test/clients/clients.rb).
set -euo pipefail
command -v ruby >/dev/null && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends ruby >/dev/null
