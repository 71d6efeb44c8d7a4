#!/usr/bin/env bash
# The Debian packages the real node's runtimes image is made of
# (internal/testutil/realnode/runtimes.go: their files as dpkg lists them,
# plus the shared libraries their programs load; built by the test itself
# in seconds and cached in $EGRET_CACHE/realnode-images keyed by content):
# curl, Python 3.11 with requests, OpenJDK 17 (the JRE in the image; javac
# compiles its client), Ruby 3.1. Node.js 24.22.3 comes from 20-npm.sh.
# Most are already installed by 10-apt.sh, 21-java.sh and 26-trust-clients.sh;
# this names them so the image never depends on another step's list.
set -euo pipefail
. "$(dirname "$0")/../apt.sh"
apt_install ca-certificates openssl curl python3-minimal python3-requests python3-six \
  openjdk-17-jre-headless openjdk-17-jdk-headless ruby ruby3.1 ruby-rubygems
