#!/usr/bin/env bash
# Builds what the e2e workload clusters run beside kube-scheduler, from the Go module proxy into
# .tools/bin, once per version (a version stamp beside each binary; a change rebuilds it):
#   kwok         sigs.k8s.io/kwok/cmd/kwok (KWOK_VERSION): runs the Nodes and the pods' lifecycle
#   lws-manager  sigs.k8s.io/lws/cmd (LWS_VERSION): the LeaderWorkerSet controller; its CRDs are
#                read from the same module (the proxy refuses lws' version list, which
#                `go install pkg@version` asks for, so it is built from a module requiring it)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/.tools/bin"
kwok_version="${KWOK_VERSION:-v0.8.0}"
lws_version="${LWS_VERSION:-v0.7.0}"
command -v go >/dev/null || { echo "go is required to build kwok and lws" >&2; exit 1; }
mkdir -p "$bin"

if [[ ! -x "$bin/kwok" || ! -f "$bin/.kwok-$kwok_version" ]]; then
  echo "building kwok $kwok_version into .tools/bin/kwok ..." >&2
  start=$SECONDS
  tmp="$(mktemp -d)"
  GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$kwok_version"
  mv "$tmp/kwok" "$bin/kwok"
  rm -rf "$tmp"
  rm -f "$bin"/.kwok-*
  touch "$bin/.kwok-$kwok_version"
  echo "kwok built in $((SECONDS - start)) s" >&2
fi

if [[ ! -x "$bin/lws-manager" || ! -f "$bin/.lws-manager-$lws_version" ]]; then
  echo "building lws $lws_version into .tools/bin/lws-manager ..." >&2
  start=$SECONDS
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  cat >"$work/go.mod" <<MOD
module plntlws

go 1.26

require sigs.k8s.io/lws $lws_version
MOD
  cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/lws/cmd"
GO
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy && GOFLAGS=-mod=mod go build -trimpath \
    -ldflags "-s -w" -o "$bin/lws-manager.$$" sigs.k8s.io/lws/cmd)
  mv "$bin/lws-manager.$$" "$bin/lws-manager"
  rm -f "$bin"/.lws-manager-*
  touch "$bin/.lws-manager-$lws_version"
  echo "lws-manager built in $((SECONDS - start)) s" >&2
fi

# Its CRD and webhook configurations, as the release installs them, from the same module: kept
# beside the binary so the tests need no Go module cache (tests/e2e/lws.py).
lws_config="$root/.tools/lws-$lws_version/config"
if [[ ! -d "$lws_config/webhook" ]]; then
  module="$(go env GOMODCACHE)/sigs.k8s.io/lws@$lws_version"
  [[ -d "$module" ]] || (cd "$(mktemp -d)" && go mod download "sigs.k8s.io/lws@$lws_version")
  rm -rf "$root/.tools/lws-$lws_version"
  mkdir -p "$lws_config"
  cp -r "$module/config/crd" "$module/config/webhook" "$lws_config/"
  chmod -R u+w "$root/.tools/lws-$lws_version"
fi
