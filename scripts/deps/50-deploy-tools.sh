#!/usr/bin/env bash
# Tools for the deploy/ tests, into a cache the tests find them in:
#   $EGRET_CACHE/tools/helm-<v>, kubeconform-<v>, release-<hash>   (EGRET_CACHE defaults to ~/.cache/egret)
#     built from source with their own go.mod under tools/ (none of their
#     dependencies enters egret's go.mod);
#   $EGRET_CACHE/tools/promtool-<debian version>
#     from Debian's prometheus package (only the promtool binary is kept):
#     building cmd/promtool compiles every Prometheus service discovery
#     (cloud SDKs, envoy), more than 45 min cold here.
# Skips a tool whose binary is present. Cold costs: docs/development.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO="${GO:-go}"
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go
dir="${EGRET_CACHE:-$HOME/.cache/egret}/tools"
mkdir -p "$dir"
# name  module-dir  package
tools=(
  "helm tools/helm helm.sh/helm/v3/cmd/helm"
  "kubeconform tools/kubeconform github.com/yannh/kubeconform/cmd/kubeconform"
)
for t in "${tools[@]}"; do
  read -r name mod pkg <<<"$t"
  # The version is the one tools/<name>/go.mod pins.
  modpath="${pkg%/cmd/*}"
  v="$(cd "$mod" && "$GO" list -m -f '{{.Version}}' "$modpath")"
  out="$dir/$name-$v"
  ln -sfn "$name-$v" "$dir/$name"
  [ -x "$out" ] && continue
  echo "building $name $v into $out (once)" >&2
  start=$(date +%s)
  tmp="$(mktemp "$dir/.$name.XXXXXX")"
  (cd "$mod" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" "$GO" build -trimpath -ldflags '-s -w' -o "$tmp" "$pkg")
  mv -f "$tmp" "$out"
  echo "$name $v ready after $(( $(date +%s) - start ))s" >&2
done

# release: make release's signer and verifier (tools/release, sigstore-go),
# keyed by its sources; the release test verifies with it.
v="$(cat tools/release/go.mod tools/release/go.sum tools/release/*.go | sha256sum | cut -c1-12)"
out="$dir/release-$v"
if [ ! -x "$out" ]; then
  echo "building release $v into $out (once)" >&2
  start=$(date +%s)
  tmp="$(mktemp "$dir/.release.XXXXXX")"
  (cd tools/release && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" "$GO" build -trimpath -ldflags '-s -w' -o "$tmp" .)
  mv -f "$tmp" "$out"
  echo "release $v ready after $(( $(date +%s) - start ))s" >&2
fi
ln -sfn "release-$v" "$dir/release"

# promtool: Debian's prometheus package, unpacked (not installed: no service).
v="$(apt-cache policy prometheus 2>/dev/null | sed -n 's/^  Candidate: //p')"
if [ -z "$v" ] || [ "$v" = "(none)" ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  flock /tmp/apt.lock $SUDO apt-get update -qq
  v="$(apt-cache policy prometheus | sed -n 's/^  Candidate: //p')"
fi
out="$dir/promtool-${v//[^A-Za-z0-9.+-]/_}"
if [ ! -x "$out" ]; then
  start=$(date +%s)
  tmp="$(mktemp -d "$dir/.promtool.XXXXXX")"
  (cd "$tmp" && flock /tmp/apt.lock apt-get download -qq "prometheus=$v" && dpkg-deb -x prometheus_*.deb x)
  mv -f "$tmp/x/usr/bin/promtool" "$out"
  rm -rf "$tmp"
  ln -sfn "$(basename "$out")" "$dir/promtool"
  echo "promtool $v ready after $(( $(date +%s) - start ))s" >&2
fi
