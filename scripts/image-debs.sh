#!/usr/bin/env bash
# image-debs.sh DIR [ARCH...]: download the Debian packages egret's images
# take files from (deploy/image -debs and -iptables-debs) into DIR, for each
# Debian ARCH (default: this machine's; make release asks for amd64 and
# arm64), from the configured apt sources (Debian 12, bookworm):
#   ca-certificates  the root CAs, pinned below (not the build machine's);
#   base-files       /etc/os-release, so scanners know the distribution;
#   iptables and the libraries its programs load (the iptables variant).
# Idempotent: a package already in DIR is not fetched again, so a filled
# DIR builds offline. deploy/image checks that every library the programs
# need is in these packages, so a missing one fails the build, not the pod.
# A foreign ARCH needs `dpkg --add-architecture ARCH` and its package lists
# (apt-get update); the script does both once, under /tmp/apt.lock.
set -euo pipefail
dir=${1:?usage: image-debs.sh DIR [ARCH...]}
shift
arches=("$@")
[ ${#arches[@]} -eq 0 ] && arches=("$(dpkg --print-architecture)")
# The root CAs of every image: this version of Debian's ca-certificates
# (Mozilla's CA list of 2025-04-19, bookworm-security) and the SHA-256 of
# its package, checked after download. Bump both together.
CA_CERTIFICATES_VERSION=20250419~deb12u2
CA_CERTIFICATES_SHA256=b9f76b5271a7ac373fd5e7e1b5b826a71ddd702b42a0d104955ecb1acfffc94b
pkgs=(base-files iptables libip4tc2 libip6tc2 libxtables12 libmnl0 libnetfilter-conntrack3 libnfnetlink0 libnftnl11 libc6)
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
mkdir -p "$dir"
chmod 0755 "$dir" # apt's download user writes here
cd "$dir"
missing=()
for a in "${arches[@]}"; do
  for p in "${pkgs[@]}"; do
    compgen -G "${p}_*_${a}.deb" >/dev/null || missing+=("$p:$a")
  done
done
ca="ca-certificates_${CA_CERTIFICATES_VERSION}_all.deb"
# EGRET_DEBS_UNPINNED_OK=1 (the test set-up, scripts/deps/25-image-debs.sh):
# when Debian no longer serves the pinned ca-certificates (a point release
# replaces it), take the candidate instead, with a warning, recorded in
# .ca-certificates-fallback; releases (make image, make release) stay pinned.
fallback=.ca-certificates-fallback
[ -f "$ca" ] || { [ "${EGRET_DEBS_UNPINNED_OK:-}" = 1 ] && [ -f "$fallback" ]; } || missing+=("ca-certificates=$CA_CERTIFICATES_VERSION")
[ ${#missing[@]} -eq 0 ] && exit 0
native=$(dpkg --print-architecture)
for a in "${arches[@]}"; do
  if [ "$a" != "$native" ] && ! dpkg --print-foreign-architectures | grep -qx "$a"; then
    echo "adding the $a architecture to dpkg (its package lists only; nothing is installed)" >&2
    $SUDO flock /tmp/apt.lock dpkg --add-architecture "$a"
    $SUDO flock /tmp/apt.lock apt-get update -qq
  fi
done
echo "downloading: ${missing[*]}" >&2
# served PKG=VERSION: whether apt's package lists have that version.
served() { apt-cache madison "${1%%=*}" 2>/dev/null | awk -F'|' '{gsub(/ /,"",$2); print $2}' | grep -qxF "${1#*=}"; }
if [ "${EGRET_DEBS_UNPINNED_OK:-}" = 1 ] && [ ! -f "$ca" ] && ! served "ca-certificates=$CA_CERTIFICATES_VERSION"; then
  $SUDO flock /tmp/apt.lock apt-get update -qq
  if ! served "ca-certificates=$CA_CERTIFICATES_VERSION"; then
    cand=$(apt-cache policy ca-certificates | sed -n 's/^  Candidate: //p')
    echo "image-debs.sh: warning: ca-certificates $CA_CERTIFICATES_VERSION is no longer served; the tests take $cand (releases stay pinned: bump CA_CERTIFICATES_VERSION and its SHA-256)" >&2
    missing=("${missing[@]/#ca-certificates=$CA_CERTIFICATES_VERSION/ca-certificates=$cand}")
    echo "$cand" >"$fallback"
  fi
fi
if ! flock /tmp/apt.lock apt-get download -qq "${missing[@]}" 2>/dev/null; then
  # No package lists yet (a fresh container): fetch them, then retry.
  $SUDO flock /tmp/apt.lock apt-get update -qq
  if ! flock /tmp/apt.lock apt-get download -qq "${missing[@]}"; then
    echo "image-debs.sh: cannot download ${missing[*]}; if ca-certificates $CA_CERTIFICATES_VERSION left the archive, pin the candidate of 'apt-cache policy ca-certificates' (and its SHA-256) here" >&2
    exit 1
  fi
fi
if [ ! -f "$ca" ] && [ -f "$fallback" ]; then
  exit 0 # the candidate taken in the pinned one's place: apt checked it against the signed lists
fi
if ! echo "$CA_CERTIFICATES_SHA256  $ca" | sha256sum -c --quiet -; then
  echo "image-debs.sh: $ca is not the pinned package (SHA-256 differs); removed" >&2
  rm -f "$ca"
  exit 1
fi
