#!/usr/bin/env bash
# Builds go-containerregistry's crane (cmd/crane) from the Go module proxy into .tools/bin/crane,
# once per CRANE_VERSION (a version stamp beside it; a change rebuilds it). The package-install
# e2e test serves its loopback OCI registry with `crane registry serve`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="${CRANE_VERSION:-v0.22.1}"
bin="$root/.tools/bin"
stamp="$bin/.crane-$version"
if [[ -x "$bin/crane" && -f "$stamp" ]]; then
  exit 0
fi
command -v go >/dev/null || { echo "go is required to build crane" >&2; exit 1; }
mkdir -p "$bin"
echo "building crane $version into .tools/bin/crane ..." >&2
start=$SECONDS
dir="$(GOFLAGS=-mod=mod go mod download -json "github.com/google/go-containerregistry@$version" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
tmp="$bin/.crane.$$"
(cd "$dir" && go build -trimpath \
  -ldflags "-s -w -X github.com/google/go-containerregistry/cmd/crane/cmd.Version=$version" \
  -o "$tmp" ./cmd/crane)
mv "$tmp" "$bin/crane"
rm -f "$bin"/.crane-*
touch "$stamp"
echo "crane built in $((SECONDS - start)) s" >&2
