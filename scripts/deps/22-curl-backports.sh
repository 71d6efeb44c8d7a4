#!/usr/bin/env bash
# libcurl 8.x for the NO_PROXY differential tests (internal/noproxy): Debian 12
# ships curl 7.88, bookworm-backports has 8.14. Only its libcurl4 .deb is
# fetched, with apt and a private source list (the system's apt sources and
# its curl 7.88 stay as they are), and unpacked into
# $EGRET_CACHE/curl-backports; the test loads that libcurl.so.4 in-process
# (test/clients/clients.py libcurl). Pinned: the test's curl rows list the
# version they were checked against. A backports archive drops a release
# when the next one arrives, so when the pinned one is no longer served the
# newest served is taken instead, with a warning, and recorded in .version
# (the differential's ledger accepts a later release in place of a row's
# last checked one; a release outside every row fails there, by name).
set -euo pipefail
VERSION=8.14.1-2+deb13u2~bpo13+1
dir="${EGRET_CACHE:-$HOME/.cache/egret}/curl-backports"
# Warm: the pinned release, or the one an earlier run took in its place.
[ -f "$dir/usr/lib/x86_64-linux-gnu/libcurl.so.4" ] && grep -qx -e "$VERSION" -e "pinned $VERSION" "$dir/.version" 2>/dev/null && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main" >"$work/sources.list"
opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent -o APT::Sandbox::User=root
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work" -o "Dir::Cache::archives=$work/archives")
flock /tmp/apt.lock apt-get "${opts[@]}" -qq update
all=$(apt-cache "${opts[@]}" madison libcurl4 | awk -F'|' '{gsub(/ /,"",$2); print $2}')
v=$VERSION
if ! grep -qxF "$VERSION" <<<"$all"; then
  v=$(sort -V <<<"$all" | tail -1)
  [ -n "$v" ] || { echo "22-curl-backports: bookworm-backports serves no libcurl4" >&2; exit 1; }
  echo "22-curl-backports: warning: libcurl4 $VERSION is no longer served; taking $v (recorded in $dir/.version)" >&2
fi
(cd "$work" && apt-get "${opts[@]}" -qq download "libcurl4=$v")
rm -rf "$dir"
mkdir -p "$dir"
dpkg-deb -x "$work"/libcurl4_*.deb "$dir"
printf 'pinned %s\nserved %s\n' "$VERSION" "$v" >"$dir/.version"
