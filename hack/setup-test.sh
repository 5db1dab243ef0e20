#!/usr/bin/env bash
# What only the test suite needs, beyond hack/setup.sh: real servers the tests start on loopback.
# Each step is idempotent and cached (Debian packages; binaries under .tools/bin). Each step that
# had work to do prints one line with the seconds it took, and the set-up ends with its total,
# so a cold set-up on a new machine says where its time went.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
started=$SECONDS
timings=()
step() {  # step NAME COMMAND...: runs the command and records how long it took
  local name=$1 start=$SECONDS
  shift
  "$@"
  # a cached step returns within a second; only real work is worth a line
  if ((SECONDS - start > 1)); then
    timings+=("$(printf '  %-40s %5d s' "$name" $((SECONDS - start)))")
  fi
}
# The image tests build a function image (mmdebstrap, umoci) and run it under runc.
step "mmdebstrap, umoci, runc (Debian)" hack/install-image-tools.sh
# The reconciler's query path runs against a real Prometheus (Debian's package).
step "prometheus (Debian)" hack/install-prometheus.sh
# Every API server of the tests and `make dev` runs on etcd built from the Go module proxy.
step "etcd" hack/install-etcd.sh
# Its Kubernetes write path runs against a real kube-apiserver; kube-controller-manager,
# kube-scheduler and kubectl come from the same build (all from the Go module proxy).
step "kube-apiserver, -controller-manager, -scheduler, kubectl" \
  .venv/bin/python -m tests.reconcile.apiserver --install
# The DRA CEL parity tests run Kubernetes' own CEL library through a small Go oracle.
step "DRA CEL oracle" .venv/bin/python -c "from tests.cel.oracle import build_oracle; build_oracle()"
# Rendered manifests are checked with Kubernetes' own validation, compiled from tests/k8svalidate.
step "Kubernetes validator" .venv/bin/python -c "from tests.k8svalidate.runner import build; build()"
# The canary gate meets a real engine: llama.cpp's llama-server, built once from PyPI's
# llama-cpp-python sdist and cached in .tools/bin.
step "llama-server" hack/install-llama-server.sh
# The live control plane of tests/e2e: Crossplane core and provider-kubernetes (built from the Go
# module proxy).
step "Crossplane core, provider-kubernetes" hack/install-controlplane.sh
# The package-install e2e test serves a loopback OCI registry with go-containerregistry's crane
# (built from the Go module proxy into .tools/bin).
step "crane" hack/install-crane.sh
# The e2e workload clusters' kwok (Nodes and pod lifecycle) and LeaderWorkerSet controller, built
# from the Go module proxy into .tools/bin.
step "kwok, lws-manager" hack/install-workload-tools.sh
if ((${#timings[@]})); then
  echo "test set-up, seconds per step that had work to do:" >&2
  printf '%s\n' "${timings[@]}" >&2
fi
echo "test set-up: $((SECONDS - started)) s in all" >&2
