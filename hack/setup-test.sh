#!/usr/bin/env bash
# What only the test suite needs, beyond hack/setup.sh: real servers the tests start on loopback.
# Each step is idempotent and cached (Debian packages; binaries under .tools/bin).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# The image tests build a function image (mmdebstrap, umoci) and run it under runc.
hack/install-image-tools.sh
# The reconciler's query path runs against a real Prometheus (Debian's package).
hack/install-prometheus.sh
# Its Kubernetes write path runs against a real kube-apiserver (built from the Go module proxy)
# and etcd (Debian's package).
.venv/bin/python -m tests.reconcile.apiserver --install
# The DRA CEL parity tests run Kubernetes' own CEL library through a small Go oracle.
.venv/bin/python -c "from tests.cel.oracle import build_oracle; build_oracle()"
# The canary gate meets a real engine: llama.cpp's llama-server, built once from PyPI's
# llama-cpp-python sdist and cached in .tools/bin (the build says how long it took).
hack/install-llama-server.sh
# The live control plane of tests/e2e: Crossplane core and provider-kubernetes (built from the Go
# module proxy; kube-controller-manager and kubectl come with kube-apiserver above).
hack/install-controlplane.sh
# The package-install e2e test serves a loopback OCI registry with go-containerregistry's crane
# (built from the Go module proxy into .tools/bin).
hack/install-crane.sh
# The e2e workload clusters' kwok (Nodes and pod lifecycle) and LeaderWorkerSet controller, built
# from the Go module proxy into .tools/bin (kube-scheduler comes with kube-apiserver above).
hack/install-workload-tools.sh
