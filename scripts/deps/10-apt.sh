#!/usr/bin/env bash
# Debian packages used by the tests: real upstream proxies (squid + htpasswd),
# real clients (curl, wget, python3-requests), iptables, chromium for the
# status page test, tinyproxy and wrk for benchmarks.
#
# The tests start their own squid and tinyproxy, on free ports with their own
# configuration. Debian's packages would also start the system's instances
# from their maintainer scripts (invoke-rc.d), which then hold :3128 (egret's
# default port, used by the quick start and the benchmarks) and :8888. So
# this install forbids those starts with a policy-rc.d that refuses only
# squid and tinyproxy, and disables their start at boot. It never stops or
# kills anything already running: a squid that runs here belongs to someone.
set -euo pipefail
pkgs=(squid apache2-utils tinyproxy iptables iproute2 curl wget python3-requests chromium wrk)
no_autostart=(squid tinyproxy)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
policy=/usr/sbin/policy-rc.d saved=""
if [ -e "$policy" ]; then
  saved=$(mktemp /usr/sbin/policy-rc.d.egret-XXXXXX)
  $SUDO cp -p "$policy" "$saved"
fi
restore() {
  if [ -n "$saved" ]; then $SUDO mv -f "$saved" "$policy"; else $SUDO rm -f "$policy"; fi
}
trap restore EXIT
# policy-rc.d(8): exit 101 = action forbidden. Other services keep the
# machine's own policy (the saved script), or are allowed when there was none.
otherwise='exit 0'
[ -n "$saved" ] && otherwise="exec $saved \"\$@\""
$SUDO tee "$policy" >/dev/null <<POLICY
#!/bin/sh
case "\$1" in $(IFS='|'; echo "${no_autostart[*]}")) exit 101 ;; esac
$otherwise
POLICY
$SUDO chmod 0755 "$policy"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Not at boot either (systemd or sysv-rc); this does not stop a running one.
for s in "${no_autostart[@]}"; do
  if [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --quiet "$s" 2>/dev/null || true
  elif command -v update-rc.d >/dev/null; then
    $SUDO update-rc.d "$s" disable >/dev/null 2>&1 || true
  fi
done
