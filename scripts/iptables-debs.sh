#!/usr/bin/env bash
# iptables-debs.sh DIR: download the Debian packages the iptables image variant
# (`make image-iptables`) is built from: iptables (iptables-nft and
# iptables-legacy) and the libraries its programs load, for the build
# machine's architecture, from its configured apt sources. Idempotent: a
# package already in DIR is not fetched again. deploy/image checks that every
# library the programs need is in these packages, so a missing one fails the
# build, not the pod.
set -euo pipefail
dir=${1:?usage: iptables-debs.sh DIR}
arch=$(dpkg --print-architecture)
pkgs=(iptables libip4tc2 libip6tc2 libxtables12 libmnl0 libnetfilter-conntrack3 libnfnetlink0 libnftnl11 libc6)
mkdir -p "$dir"
chmod 0755 "$dir" # apt's download user writes here
cd "$dir"
missing=()
for p in "${pkgs[@]}"; do
  compgen -G "${p}_*_${arch}.deb" >/dev/null || missing+=("$p:$arch")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "downloading: ${missing[*]}" >&2
if ! apt-get download -qq "${missing[@]}" 2>/dev/null; then
  # No package lists yet (a fresh container): fetch them, then retry.
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  apt-get download -qq "${missing[@]}"
fi
