#!/usr/bin/env bash
# Builds the real Crossplane CLI (crank) from the Go module proxy into .tools/bin, once.
#
# DESIGN.md names v2.2.4, but the module proxy reachable here refuses v2.2.2 through v2.2.5
# (403 "not available"), and `go install pkg@version` also needs the module's version list,
# which it refuses too. So we download the newest v2.2 release it serves (v2.2.1) with
# `go mod download` and build cmd/crank inside that module, which honours its own go.mod and
# go.sum exactly as a checkout would. v2.4.0 moved crank out of the module; v2.3+ needs
# replace directives. Override with CROSSPLANE_VERSION=vX.Y.Z.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="${CROSSPLANE_VERSION:-v2.2.1}"
bin="$root/.tools/bin"
stamp="$bin/.crank-$version"
if [[ -x "$bin/crank" && -f "$stamp" ]]; then
  exit 0
fi
command -v go >/dev/null || { echo "go is required to build the Crossplane CLI" >&2; exit 1; }
mkdir -p "$bin"
echo "building the Crossplane CLI $version (crank) into .tools/bin ..." >&2
start=$SECONDS
dir="$(GOFLAGS=-mod=mod go mod download -json "github.com/crossplane/crossplane/v2@$version" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
(cd "$dir" && go build -trimpath \
  -ldflags "-s -w -X github.com/crossplane/crossplane/v2/internal/version.version=$version" \
  -o "$bin/crank" ./cmd/crank)
ln -sf crank "$bin/crossplane"
rm -f "$bin"/.crank-*
touch "$stamp"
echo "the Crossplane CLI built in $((SECONDS - start)) s" >&2
