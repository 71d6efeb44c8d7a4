#!/usr/bin/env bash
# Java 17 (javac + java) for the NO_PROXY differential tests: the JDK's own
# ProxySelector.getDefault() is asked for each case (test/clients/Harness.java).
set -euo pipefail
command -v javac >/dev/null && command -v java >/dev/null && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends openjdk-17-jdk-headless >/dev/null
