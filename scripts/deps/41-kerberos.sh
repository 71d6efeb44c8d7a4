#!/usr/bin/env bash
# Tools for the NTLM and Kerberos upstream tests: a real MIT KDC (krb5kdc,
# kdb5_util, kadmin.local) whose realm, principals and keytabs each test
# creates in a temporary directory, and libfaketime to run that KDC with its
# clock off (the clock-skew test). Squid's negotiate_kerberos_auth and
# ntlm_fake_auth helpers come with the squid package (10-apt.sh).
set -euo pipefail
. "$(dirname "$0")/../apt.sh"
apt_install krb5-kdc krb5-admin-server faketime
# The packages' services find no realm and do not run; the tests start
# their own KDC.
