# Sourced by the scripts of scripts/deps (and scripts/bench-deps.sh):
# apt_install PKG... installs the Debian packages of the list that are not
# installed yet, and does nothing when all are. One apt at a time on a shared
# machine: every apt-get runs under flock /tmp/apt.lock.

# apt_missing PKG... prints the packages that are not installed.
apt_missing() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}

apt_install() {
  local missing
  mapfile -t missing < <(apt_missing "$@")
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo flock /tmp/apt.lock apt-get update -qq
  $sudo flock /tmp/apt.lock env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# apt_install_quiet "SERVICE..." PKG... is apt_install with the services
# named kept from starting: a policy-rc.d(8) that refuses them (exit 101)
# while the packages install — the machine's own policy, if any, still
# decides for every other service and is put back afterwards — and the
# services disabled at boot (systemd or sysv-rc). A running one is not
# stopped.
apt_install_quiet() {
  local services=($1) missing
  shift
  mapfile -t missing < <(apt_missing "$@")
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  local policy=/usr/sbin/policy-rc.d saved="" otherwise='exit 0'
  if [ -e "$policy" ]; then
    saved=$(mktemp /usr/sbin/policy-rc.d.egret-XXXXXX)
    $sudo cp -p "$policy" "$saved"
    otherwise="exec $saved \"\$@\""
  fi
  $sudo tee "$policy" >/dev/null <<POLICY
#!/bin/sh
case "\$1" in $(IFS='|'; echo "${services[*]}")) exit 101 ;; esac
$otherwise
POLICY
  $sudo chmod 0755 "$policy"
  local rc=0
  apt_install "$@" || rc=$?
  if [ -n "$saved" ]; then $sudo mv -f "$saved" "$policy"; else $sudo rm -f "$policy"; fi
  [ $rc -eq 0 ] || return $rc
  local s
  for s in "${services[@]}"; do
    if [ -d /run/systemd/system ]; then
      $sudo systemctl disable --quiet "$s" 2>/dev/null || true
    elif command -v update-rc.d >/dev/null; then
      $sudo update-rc.d "$s" disable >/dev/null 2>&1 || true
    fi
  done
}
