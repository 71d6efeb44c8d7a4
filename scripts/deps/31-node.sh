#!/usr/bin/env bash
# What the real-node tests (internal/testutil/realnode, test/realnode) need on
# top of 30-kube.sh's kube-apiserver and etcd:
#   Debian packages: containerd (1.6), runc, containernetworking-plugins,
#     docker-registry, busybox-static, iptables. The tests run every daemon
#     themselves with private configs and sockets; the packages' own services
#     are never started (policy-rc.d refuses them during the install).
#   Built from Go modules (tools/kube, tools/coredns) into the same versioned
#   cache as 30-kube.sh:
#     $EGRET_CACHE/kube/v1.37.2/{kubelet,kube-controller-manager,kube-scheduler,
#                                kube-proxy,kubectl,coredns}
# Skips what is present. Measured on 2 shared cores after 30-kube.sh: see
# docs/kubernetes.md ("Tested with").
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/apt.sh

# The tests run containerd and the registry themselves: the packages' own
# services are kept from starting (scripts/apt.sh apt_install_quiet).
apt_install_quiet "containerd docker-registry" containerd runc containernetworking-plugins docker-registry busybox-static iptables

KUBE_VERSION=v1.37.2
dir="${EGRET_CACHE:-$HOME/.cache/egret}/kube/$KUBE_VERSION"
kube_tools=(kubelet kube-controller-manager kube-scheduler kube-proxy kubectl)
# kubectl has no --version flag.
version_of() { if [ "$1" = kubectl ]; then "$dir/kubectl" version --client 2>/dev/null; else "$dir/$1" --version 2>/dev/null; fi; }
need=()
for b in "${kube_tools[@]}"; do
  # The version is read whole before it is matched: grep -q in a pipe would
  # stop reading at the match, and kubectl, writing a second line (its
  # Kustomize version) into the closed pipe, dies of SIGPIPE — under
  # pipefail a present kubectl then looked missing and was rebuilt.
  [ -x "$dir/$b" ] && [[ "$(version_of "$b")" == *"$KUBE_VERSION"* ]] || need+=("$b")
done
have_coredns=0
[ -x "$dir/coredns" ] && "$dir/coredns" -version >/dev/null 2>&1 && have_coredns=1
[ ${#need[@]} -eq 0 ] && [ $have_coredns = 1 ] && exit 0

GO="${GO:-go}"
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly"
if [ ${#need[@]} -gt 0 ]; then
  echo "building ${need[*]} $KUBE_VERSION into $dir (several minutes, once)" >&2
  v=k8s.io/component-base/version
  minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  # One go build for all of them: the shared packages compile once, in
  # parallel, and mostly come from 30-kube.sh's build already.
  pkgs=(); for b in "${need[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  (cd tools/kube && nice "$GO" build -trimpath -o "$tmp/" -ldflags "-s -w \
    -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor \
    -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z" "${pkgs[@]}")
  for b in "${need[@]}"; do mv -f "$tmp/$b" "$dir/"; version_of "$b" >&2; done
fi
if [ $have_coredns = 0 ]; then
  echo "building coredns into $dir" >&2
  (cd tools/coredns && nice "$GO" build -trimpath -ldflags '-s -w' -o "$tmp/coredns" .)
  "$tmp/coredns" -version | sed -n 1p >&2
  mv -f "$tmp/coredns" "$dir/"
fi
echo "node binaries ready in $dir after $(( $(date +%s) - start ))s" >&2
