#!/usr/bin/env bash
# Tools for the transparent-mode tests (issue 5) beyond 10-apt.sh:
# openssl (s_client for SNI sniffing), util-linux (setpriv, to run test
# clients as another UID), procps (sysctl: forwarding in the e2e gateway
# namespace). iptables (nft + legacy), iproute2 and curl come
# from 10-apt.sh.
set -euo pipefail
. "$(dirname "$0")/../apt.sh"
apt_install openssl util-linux iptables iproute2 curl procps
