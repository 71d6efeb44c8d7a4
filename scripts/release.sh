#!/usr/bin/env bash
# release.sh: `make release` — everything a user installs egret from, for one
# version, into dist/<version>/, with no Docker daemon and no registry:
#   egret-<v>.oci.tar            the egret image, an OCI image layout (tar) for
#                                linux/amd64 and linux/arm64 (deploy/image)
#   egret-iptables-<v>.oci.tar   the image with iptables, for the init container
#   egret-<v without v>.tgz      the Helm chart, version <v>, pinned to both
#                                images by digest
#   egret.yaml                   the chart rendered with its defaults, to
#                                kubectl apply as is
#   *.spdx.json                  SPDX 2.3 SBOMs per image and platform (the Go
#                                modules; the iptables image's Debian packages)
#   *.cosign-payload.json        what cosign signs for an image (cosign generate),
#                                for `cosign attach signature` at publication
#   SHA256SUMS                   checksums of all of the above
#   FILE.sigstore.json           a Sigstore bundle per file, signed with the key
#   provenance.sigstore.json     an SLSA v1 provenance statement over every
#                                file, signed (DSSE)
#   cosign.pub                   the key that verifies them
# then verifies every signature with sigstore-go's verifier (tools/release).
#
# Environment: VERSION (a tag, e.g. v0.1.0; default git describe), COMMIT,
# BUILD_DATE, IMAGE_REPO (default ghcr.io/egret-io/egret), DIST (default
# dist), COSIGN_KEY (a cosign key file; default: a new key pair for this
# build in DIST/<v>/.key), COSIGN_PASSWORD, EGRET_CACHE, GO.
# Offline once the caches are filled: the Debian packages
# (scripts/image-debs.sh), helm and release tools (scripts/deps/50-deploy-tools.sh),
# the Go module cache.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
cache="${EGRET_CACHE:-$HOME/.cache/egret}"
version="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
commit="${COMMIT:-$(git rev-parse HEAD)}"
date="${BUILD_DATE:-$(date -u -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}" +%Y-%m-%dT%H:%M:%SZ)}"
repo="${IMAGE_REPO:-ghcr.io/egret-io/egret}"
chartver="${version#v}"
out="${DIST:-dist}/$version"
platforms=(linux/amd64 linux/arm64)
start=$(date +%s)

rm -rf "$out" && mkdir -p "$out"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

# Tools: helm and the signer/verifier, built once into the cache.
helm="${HELM:-$cache/tools/helm}"
release="${RELEASE_TOOL:-$cache/tools/release}"
[ -x "$helm" ] && [ -x "$release" ] || ./scripts/deps/50-deploy-tools.sh >&2

# 1. Binaries and images.
./scripts/image-debs.sh "$cache/image-debs" amd64 arm64
binflags=()
for p in "${platforms[@]}"; do
  b="$tmp/bin/${p//\//-}/egret"
  CGO_ENABLED=0 GOOS="${p%/*}" GOARCH="${p#*/}" "$GO" build -trimpath \
    -ldflags "-s -w -X egret.io/egret/internal/version.version=$version -X egret.io/egret/internal/version.commit=$commit -X egret.io/egret/internal/version.dirty=false -X egret.io/egret/internal/version.date=$date" \
    -o "$b" ./cmd/egret
  binflags+=(-binary "$p=$b")
done
image() { # image NAME TAG [extra flags]: the layout's index digest on stdout
  local name=$1 tag=$2; shift 2
  "$GO" run ./deploy/image "${binflags[@]}" -debs "$cache/image-debs" "$@" \
    -version "$version" -revision "$commit" -created "$date" -sbom "$out" -o "$tmp/$name" -tag "$tag" \
    | awk -v o="$tmp/$name" '$1 == o {print $3}'
  # An OCI archive: the layout as a reproducible tar.
  tar --sort=name --mtime="$date" --owner=0 --group=0 --numeric-owner -C "$tmp/$name" -cf "$out/$name-$version.oci.tar" .
}
digest="$(image egret "$repo:$version")"
ipt_digest="$(image egret-iptables "$repo:$version-iptables" -iptables-debs "$cache/image-debs")"
[[ $digest == sha256:* && $ipt_digest == sha256:* ]] || { echo "release: no image digest ($digest, $ipt_digest)" >&2; exit 1; }

# What cosign signs for an image (cosign generate IMAGE@DIGEST prints it).
payload() {
  printf '{"critical":{"identity":{"docker-reference":"%s"},"image":{"docker-manifest-digest":"%s"},"type":"cosign container image signature"},"optional":null}' "$1" "$2"
}
payload "$repo" "$digest" >"$out/egret-$version.cosign-payload.json"
payload "$repo" "$ipt_digest" >"$out/egret-iptables-$version.cosign-payload.json"

# 2. The chart, at this version, pinned to the images by digest.
cp -r deploy/helm/egret "$tmp/chart"
sed -i "s/^version: .*/version: $chartver/; s/^appVersion: .*/appVersion: \"$chartver\"/" "$tmp/chart/Chart.yaml"
sed -i "0,/^  tag: .*/s//  tag: \"$version\"/; 0,/^  digest: .*/s//  digest: \"$digest\"/; 0,/^  iptables: .*/s##  iptables: \"$repo:$version-iptables@$ipt_digest\"#" "$tmp/chart/values.yaml"
"$helm" package "$tmp/chart" -d "$tmp" >/dev/null
mv "$tmp/egret-$chartver.tgz" "$out/egret-$chartver.tgz"
# 3. The plain manifests: the namespace (as deploy/base makes it: excluded
# from injection, restricted) and the chart's defaults in it.
{ cat deploy/base/namespace.yaml; echo "---"; "$helm" template egret "$out/egret-$chartver.tgz" -n egret-system --kube-version "${KUBE_VERSION:-1.29.0}"; } >"$out/egret.yaml"

# 4. Checksums, signatures, provenance.
(cd "$out" && sha256sum -- * >SHA256SUMS)
key="${COSIGN_KEY:-}"
if [ -z "$key" ]; then
  echo "release: no COSIGN_KEY: signing with a new key pair for this build ($out/.key)" >&2
  "$release" keygen -dir "$out/.key"
  key="$out/.key/cosign.key"
  cp "$out/.key/cosign.pub" "$out/cosign.pub"
else
  "$release" pubkey -key "$key" >"$out/cosign.pub"
fi
files=()
for f in "$out"/*; do [ "$(basename "$f")" = cosign.pub ] || files+=("$f"); done
"$release" sign -key "$key" "${files[@]}"
"$release" provenance -key "$key" -out "$out/provenance.sigstore.json" -version "$version" -commit "$commit" -started "$(date -u -d "@$start" +%Y-%m-%dT%H:%M:%SZ)" "${files[@]}"
"$release" verify -pub "$out/cosign.pub" -dir "$out" >&2
echo "release $version in $out after $(( $(date +%s) - start ))s: egret $digest, egret-iptables $ipt_digest" >&2
