#!/usr/bin/env bash
# Builds etcd (ETCD_VERSION) from the Go module proxy into .tools/bin/etcd, once per version (a
# version stamp beside it; a change rebuilds it). Every API server of the test suite and
# `make dev` runs on it: Kubernetes' API server wants etcd 3.5 or newer, and on Debian's 3.4 it
# refuses the streaming watch-lists that kwok's client asks for, so kwok's watches keep
# restarting and every pod stage runs seconds late.
#
# etcd's own command is a thin main around server/v3/etcdmain, built here from a small module
# that requires it (the server module's replace directives point at folders of etcd's repository
# and are ignored in a dependency, so it uses the published api, client and pkg modules of the
# same version).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/.tools/bin"
version="${ETCD_VERSION:-v3.6.16}"
stamp="$bin/.etcd-$version"
if [[ -x "$bin/etcd" && -f "$stamp" ]]; then
  exit 0
fi
command -v go >/dev/null || { echo "go is required to build etcd" >&2; exit 1; }
mkdir -p "$bin"
echo "building etcd $version into .tools/bin/etcd ..." >&2
start=$SECONDS
work="$(mktemp -d)"
trap 'rm -rf "$work" "$bin/.etcd.$$"' EXIT
cat >"$work/go.mod" <<MOD
module plntetcd

go 1.26

require go.etcd.io/etcd/server/v3 $version
MOD
cat >"$work/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
# into a new file, then renamed: a running etcd keeps its own
(cd "$work" && GOFLAGS=-mod=mod go mod tidy && GOFLAGS=-mod=mod go build -trimpath \
  -ldflags "-s -w" -o "$bin/.etcd.$$" .)
reported="$("$bin/.etcd.$$" --version | sed -n 's/^etcd Version: //p')"
if [[ "v$reported" != "$version" ]]; then
  rm -f "$bin/.etcd.$$"
  echo "the etcd built reports version '$reported', not $version" >&2
  exit 1
fi
mv "$bin/.etcd.$$" "$bin/etcd"
rm -f "$bin"/.etcd-*
touch "$stamp"
echo "etcd built in $((SECONDS - start)) s" >&2
