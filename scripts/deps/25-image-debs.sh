#!/usr/bin/env bash
# The Debian packages of egret's images (deploy/image: the pinned
# ca-certificates, base-files, and the iptables variant's packages) for
# linux/amd64 and linux/arm64, downloaded once into the cache:
#   $EGRET_CACHE/image-debs   (EGRET_CACHE defaults to ~/.cache/egret)
# The tests and `make release` read them there and never download. The
# tests accept the served ca-certificates when Debian has dropped the pinned
# one (EGRET_DEBS_UNPINNED_OK, see image-debs.sh); releases do not. Cold:
# 21 packages, about 9 MB (and arm64's package lists once); 0 s when cached.
set -euo pipefail
cd "$(dirname "$0")/../.."
EGRET_DEBS_UNPINNED_OK=1 exec ./scripts/image-debs.sh "${EGRET_CACHE:-$HOME/.cache/egret}/image-debs" amd64 arm64
