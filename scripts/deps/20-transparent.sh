#!/usr/bin/env bash
# Tools for the transparent-mode tests (issue 5) beyond 10-apt.sh:
# openssl (s_client for SNI sniffing), util-linux (setpriv, to run test
# clients as another UID), procps (sysctl: forwarding in the e2e gateway
# namespace). iptables (nft + legacy), iproute2 and curl come
# from 10-apt.sh.
set -euo pipefail
pkgs=(openssl util-linux iptables iproute2 curl procps)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
