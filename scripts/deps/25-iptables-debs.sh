#!/usr/bin/env bash
# The Debian packages of the iptables image variant (deploy/image, make
# image-iptables) for TestIptablesImage, downloaded once into the cache:
#   $EGRET_CACHE/iptables-debs   (EGRET_CACHE defaults to ~/.cache/egret)
# The tests read them there and never download. Cold: 9 packages, about
# 3.5 MB, a few seconds; 0 s when cached.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec ./scripts/iptables-debs.sh "${EGRET_CACHE:-$HOME/.cache/egret}/iptables-debs"
