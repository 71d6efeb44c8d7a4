#!/usr/bin/env bash
# The runtimes whose CA handling internal/trust checks for real and that the
# machine image lacks: Ruby (Debian 12: 3.1, with openssl and net-http), also
# the Ruby of the NO_PROXY differential (internal/noproxy, test/clients/clients.rb).
# curl, openssl, git, Python (requests, botocore), Node.js and the JDK come
# from the image or the other scripts.
set -euo pipefail
command -v ruby >/dev/null && exit 0
. "$(dirname "$0")/../apt.sh"
apt_install ruby
