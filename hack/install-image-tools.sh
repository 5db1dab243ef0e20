#!/usr/bin/env bash
# Installs the Debian packages that build and run plnt's images without a Docker engine:
# mmdebstrap (the base rootfs), umoci (OCI layouts: layers, image config, unpacking into a
# runtime bundle) and runc (the OCI runtime the image tests run a function with). Idempotent:
# does nothing when all are on PATH, and refreshes the package lists only when apt lacks one.
set -euo pipefail
packages=(mmdebstrap umoci runc)
missing=()
for p in "${packages[@]}"; do
  command -v "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ "$(id -u)" -ne 0 ]]; then
  echo "install-image-tools: ${missing[*]} missing and installing them needs root" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
for p in "${missing[@]}"; do
  candidate="$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')"
  if [[ -z "$candidate" || "$candidate" == "(none)" ]]; then
    apt-get update -qq
    break
  fi
done
echo "installing Debian's ${missing[*]} ..." >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for p in "${missing[@]}"; do command -v "$p" >/dev/null; done
