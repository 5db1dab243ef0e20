#!/usr/bin/env bash
# Installs Debian's prometheus package, which the reconciler's query-path tests start on
# loopback. Idempotent: does nothing when `prometheus` is already on PATH, and refreshes the
# package lists (apt-get update) only when apt does not know the package yet.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
if [[ "$(id -u)" -ne 0 ]]; then
  echo "install-prometheus: prometheus is not on PATH and installing it needs root" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
candidate="$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')"
if [[ -z "$candidate" || "$candidate" == "(none)" ]]; then
  apt-get update -qq
fi
echo "installing Debian's prometheus package ..." >&2
# No recommends: the tests need only the server binary, not the node exporter or the web assets.
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v prometheus >/dev/null
