#!/usr/bin/env bash
# Real kube-apiserver (k8s.io/kubernetes v1.37.2) and etcd (v3.7.0) for the
# Kubernetes tests, built from source with tools/kube/go.mod into a cache:
#   $EGRET_CACHE/kube/v1.37.2/{kube-apiserver,etcd}   (EGRET_CACHE defaults to ~/.cache/egret)
# Skips when both binaries are present and answer. Measured on 2 shared cores: 4-11 min
# for a cold build, 0 s when cached. internal/testutil/kubetest finds them there.
set -euo pipefail
cd "$(dirname "$0")/../.."
KUBE_VERSION=v1.37.2
dir="${EGRET_CACHE:-$HOME/.cache/egret}/kube/$KUBE_VERSION"
if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ] \
  && [ "$("$dir/kube-apiserver" --version 2>/dev/null)" = "Kubernetes $KUBE_VERSION" ] \
  && "$dir/etcd" --version >/dev/null 2>&1; then
  exit 0
fi
GO="${GO:-go}"
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "building kube-apiserver $KUBE_VERSION and etcd into $dir (a few minutes, once)" >&2
start=$(date +%s)
(
  cd tools/kube
  export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly"
  # The shared dependencies compile once: the second build reuses the cache.
  # Stamp the version as kubernetes' own build does (hack/lib/version.sh):
  # /version must answer 1.37 for the webhook's native-sidecar check.
  v=k8s.io/component-base/version
  minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  "$GO" build -trimpath -o "$tmp/kube-apiserver" -ldflags "-s -w \
    -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor \
    -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z" \
    k8s.io/kubernetes/cmd/kube-apiserver
  "$GO" build -trimpath -ldflags '-s -w' -o "$tmp/etcd" go.etcd.io/etcd/server/v3
)
"$tmp/kube-apiserver" --version >&2
"$tmp/etcd" --version | sed -n 1p >&2  # sed reads it all: no SIGPIPE under pipefail
mv -f "$tmp/kube-apiserver" "$tmp/etcd" "$dir/"
echo "kube binaries ready in $dir after $(( $(date +%s) - start ))s" >&2
