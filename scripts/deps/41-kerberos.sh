#!/usr/bin/env bash
# Tools for the NTLM and Kerberos upstream tests: a real MIT KDC (krb5kdc,
# kdb5_util, kadmin.local) whose realm, principals and keytabs each test
# creates in a temporary directory, and libfaketime to run that KDC with its
# clock off (the clock-skew test). Squid's negotiate_kerberos_auth and
# ntlm_fake_auth helpers come with the squid package (10-apt.sh).
set -euo pipefail
pkgs=(krb5-kdc krb5-admin-server faketime)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
# One apt at a time on a shared machine.
$SUDO flock /tmp/apt.lock apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO flock /tmp/apt.lock apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The packages' services find no realm and do not run; the tests start
# their own KDC.
