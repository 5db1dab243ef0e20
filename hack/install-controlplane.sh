#!/usr/bin/env bash
# Builds what the live control plane of tests/e2e runs, beyond kube-apiserver and etcd:
#   .tools/bin/crossplane-core       Crossplane core (cmd/crossplane) at CROSSPLANE_CORE_VERSION
#   .tools/bin/provider-kubernetes   provider-kubernetes (cmd/provider) at PROVIDER_KUBERNETES_VERSION
# plus their CRDs under .tools/crds/<name>/, and Crossplane's own ClusterRole as its Helm chart
# ships it (.tools/crds/crossplane-rbac/clusterrole.yaml, a template: the package-install test
# runs Crossplane with it). Each is built once from the Go module proxy and cached; a version
# change rebuilds it.
#
# Crossplane v2.3.0's go.mod replaces github.com/crossplane/crossplane/apis/v2 with ./apis, a
# folder the module zip leaves out; the same go.mod requires the pseudo-version the proxy serves,
# so the build drops the replace and uses that. provider-kubernetes v1.2.0 is the newest release
# that builds here (v1.3.1 needs a module the proxy refuses; v1.4 needs a newer Go).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/.tools/bin"
crds="$root/.tools/crds"
core_version="${CROSSPLANE_CORE_VERSION:-v2.3.0}"
pk_version="${PROVIDER_KUBERNETES_VERSION:-v1.2.0}"
mkdir -p "$bin" "$crds"
export GOFLAGS=-mod=mod

module_dir() {  # a writable copy of a module from the proxy, printed as a path
  local src
  src="$(go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  local dst
  dst="$(mktemp -d)"
  cp -r "$src/." "$dst"
  chmod -R u+w "$dst"
  echo "$dst"
}

# The version Crossplane reports (and checks packages' spec.crossplane.version against) lives in
# crossplane-runtime's pkg/version since v2.3; built without it, core reports "" and refuses
# every package with a version constraint ("invalid semantic version"). The stamp names the
# recipe, so a binary built before this was fixed is rebuilt.
core_stamp="$bin/.crossplane-core-$core_version-runtime-version"
if [[ ! -x "$bin/crossplane-core" || ! -f "$core_stamp" ]]; then
  echo "building Crossplane core $core_version into .tools/bin/crossplane-core ..." >&2
  start=$SECONDS
  dir="$(module_dir "github.com/crossplane/crossplane/v2@$core_version")"
  sed -i '/^replace github.com\/crossplane\/crossplane\/apis\/v2 => \.\/apis$/d' "$dir/go.mod"
  # into a new file, then renamed: a running crossplane-core keeps its own
  (cd "$dir" && go build -trimpath \
    -ldflags "-s -w -X github.com/crossplane/crossplane-runtime/v2/pkg/version.version=$core_version" \
    -o "$bin/.crossplane-core.$$" ./cmd/crossplane)
  mv "$bin/.crossplane-core.$$" "$bin/crossplane-core"
  rm -rf "$crds/crossplane"
  cp -r "$dir/cluster/crds" "$crds/crossplane"
  rm -rf "$crds/crossplane-rbac" && mkdir -p "$crds/crossplane-rbac"
  cp "$dir/cluster/charts/crossplane/templates/clusterrole.yaml" "$crds/crossplane-rbac/"
  rm -rf "$dir"
  rm -f "$bin"/.crossplane-core-*
  touch "$core_stamp"
  echo "Crossplane core built in $((SECONDS - start)) s" >&2
fi

if [[ ! -x "$bin/provider-kubernetes" || ! -f "$bin/.provider-kubernetes-$pk_version" ]]; then
  echo "building provider-kubernetes $pk_version into .tools/bin/provider-kubernetes ..." >&2
  start=$SECONDS
  dir="$(module_dir "github.com/crossplane-contrib/provider-kubernetes@$pk_version")"
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$bin/provider-kubernetes" ./cmd/provider)
  rm -rf "$crds/provider-kubernetes"
  cp -r "$dir/package/crds" "$crds/provider-kubernetes"
  rm -rf "$dir"
  rm -f "$bin"/.provider-kubernetes-*
  touch "$bin/.provider-kubernetes-$pk_version"
  echo "provider-kubernetes built in $((SECONDS - start)) s" >&2
fi

# Crossplane's ClusterRole from its chart, for a core built before it was copied with the CRDs.
if [[ ! -f "$crds/crossplane-rbac/clusterrole.yaml" ]]; then
  dir="$(module_dir "github.com/crossplane/crossplane/v2@$core_version")"
  mkdir -p "$crds/crossplane-rbac"
  cp "$dir/cluster/charts/crossplane/templates/clusterrole.yaml" "$crds/crossplane-rbac/"
  rm -rf "$dir"
fi
