#!/usr/bin/env bash
# Go releases for the NO_PROXY differential tests (internal/noproxy): the
# go model row starts at Go 1.24.1, so test/clients/goclient is built with
# the go1.24.0 (just outside) and go1.24.1 toolchains, fetched from the Go
# module proxy (GOTOOLCHAIN), into $EGRET_CACHE/noproxy-go/goclient-<version>.
# The toolchain building egret itself is the row's other end.
set -euo pipefail
src="$(cd "$(dirname "$0")/../../test/clients/goclient" && pwd)"
dir="${EGRET_CACHE:-$HOME/.cache/egret}/noproxy-go"
mkdir -p "$dir"
for v in 1.24.0 1.24.1; do
  [ -x "$dir/goclient-$v" ] && continue
  (cd "$src" && GOTOOLCHAIN="go$v" GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$dir/goclient-$v.tmp" .)
  mv "$dir/goclient-$v.tmp" "$dir/goclient-$v"
done
