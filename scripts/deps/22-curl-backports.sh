#!/usr/bin/env bash
# libcurl 8.x for the NO_PROXY differential tests (internal/noproxy): Debian 12
# ships curl 7.88, bookworm-backports has 8.14. Only its libcurl4 .deb is
# fetched, with apt and a private source list (the system's apt sources and
# its curl 7.88 stay as they are), and unpacked into
# $EGRET_CACHE/curl-backports; the test loads that libcurl.so.4 in-process
# (test/clients/clients.py libcurl). Pinned: the test's curl rows list the
# version they were checked against.
set -euo pipefail
VERSION=8.14.1-2+deb13u2~bpo13+1
dir="${EGRET_CACHE:-$HOME/.cache/egret}/curl-backports"
[ "$(cat "$dir/.version" 2>/dev/null)" = "$VERSION" ] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main" >"$work/sources.list"
opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent -o APT::Sandbox::User=root
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work" -o "Dir::Cache::archives=$work/archives")
flock /tmp/apt.lock apt-get "${opts[@]}" -qq update
(cd "$work" && apt-get "${opts[@]}" -qq download "libcurl4=$VERSION")
rm -rf "$dir"
mkdir -p "$dir"
dpkg-deb -x "$work"/libcurl4_*.deb "$dir"
echo "$VERSION" >"$dir/.version"
