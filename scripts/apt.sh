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
