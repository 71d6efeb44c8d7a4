#!/usr/bin/env bash
# GNU Wget 1.25.0 (Debian 13 trixie) and curl 8.23.0 (trixie-backports) for
# the NO_PROXY differential tests (internal/noproxy): the wget row ends at
# 1.25.0 and the curl row at 8.23.0, Debian 12 has 1.21.3 and 7.88. Their
# .debs and those of every library they need, trixie's glibc among them, are
# fetched with apt and a private source list (the system's apt sources, wget
# and curl stay as they are) and unpacked into $EGRET_CACHE/debian-trixie;
# ./wget and ./curl there run the binaries through trixie's own dynamic
# loader, ./python3 runs the system's Python through it. Libraries come from
# trixie-backports where it has them (curl 8.2x needs its ngtcp2).
#
# The rows list the releases they were checked against (WGET, CURL below), but
# a backports archive drops a release when the next one arrives: when the
# pinned one is no longer served, the newest served is taken instead, with a
# warning, and recorded in .version (the differential then runs that release;
# its ledger accepts a later release in place of a row's last checked one).
set -euo pipefail
WGET=1.25.0-2
CURL=8.23.0-2~bpo13+1
LIBS=(libc6 libgcc-s1 zlib1g libgnutls30t64 libidn2-0 libnettle8t64 libhogweed6t64 libpcre2-8-0 libpsl5t64 libuuid1
  libp11-kit0 libtasn1-6 libunistring5 libgmp10 libffi8 libbrotli1 libcom-err2 libgssapi-krb5-2 libk5crypto3
  libkeyutils1 libkrb5-3 libkrb5support0 libldap2 libnghttp2-14 libnghttp3-9 libngtcp2-16 libngtcp2-crypto-ossl0
  libsasl2-2 libssh2-1t64 libssl3t64 libzstd1)
dir="${EGRET_CACHE:-$HOME/.cache/egret}/debian-trixie"
stamp="wget=$WGET curl=$CURL python3"
# Warm: the pinned releases, or the ones an earlier run took in their place.
if [ -x "$dir/curl" ] && [ -x "$dir/wget" ] && grep -q "^pinned $stamp\$" "$dir/.version" 2>/dev/null; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/debs"
for suite in trixie trixie-backports; do
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main"
done >"$work/sources.list"
opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent -o APT::Sandbox::User=root
  -o APT::Default-Release=trixie-backports
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work" -o "Dir::Cache::archives=$work/archives")
flock /tmp/apt.lock apt-get "${opts[@]}" -qq update
# served PKG WANT: WANT when the archive serves it, else the newest it serves.
served() {
  local all
  all=$(apt-cache "${opts[@]}" madison "$1" | awk -F'|' '{gsub(/ /,"",$2); print $2}')
  if grep -qxF "$2" <<<"$all"; then echo "$2"; return; fi
  local newest
  newest=$(sort -V <<<"$all" | tail -1)
  [ -n "$newest" ] || { echo "27-debian-trixie: Debian serves no $1 for trixie" >&2; exit 1; }
  echo "27-debian-trixie: warning: $1 $2 is no longer served; taking $newest (recorded in $dir/.version)" >&2
  echo "$newest"
}
wget_v=$(served wget "$WGET")
curl_v=$(served curl "$CURL")
(cd "$work/debs" && apt-get "${opts[@]}" -qq download "wget=$wget_v" "curl=$curl_v" "libcurl4t64=$curl_v" "${LIBS[@]}")
rm -rf "$dir"
mkdir -p "$dir/root"
for f in "$work"/debs/*.deb; do dpkg-deb -x "$f" "$dir/root"; done
for tool in wget curl; do
  cat >"$dir/$tool" <<SH
#!/bin/sh
r="\$(dirname "\$0")/root"
l="\$r/usr/lib/x86_64-linux-gnu"
exec "\$l/ld-linux-x86-64.so.2" --library-path "\$l" "\$r/usr/bin/$tool" "\$@"
SH
  chmod +x "$dir/$tool"
  "$dir/$tool" --version | head -1
done
# Debian 12's Python under trixie's glibc, to load trixie's libcurl in-process
# (test/clients/clients.py libcurl): a process per case costs 60 ms.
cat >"$dir/python3" <<'SH'
#!/bin/sh
l="$(dirname "$0")/root/usr/lib/x86_64-linux-gnu"
exec "$l/ld-linux-x86-64.so.2" --library-path "$l" /usr/bin/python3 "$@"
SH
chmod +x "$dir/python3"
"$dir/python3" -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$dir/root/usr/lib/x86_64-linux-gnu/libcurl.so.4"
printf 'pinned %s\nwget=%s curl=%s\n' "$stamp" "$wget_v" "$curl_v" >"$dir/.version"
