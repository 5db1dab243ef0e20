"""The Gateway API Inference Extension's InferencePool CRD (inference.networking.k8s.io/v1).

Upstream (kubernetes-sigs/gateway-api-inference-extension, config/crd/bases) publishes the CRD
only as plain YAML, never as a chart, so InferenceCluster installs it through a
provider-kubernetes Object. The CRD is read from the vendored upstream file
(third_party/crds/inference.networking.k8s.io_inferencepools.yaml, linked beside this module so
the wheel carries it), never retyped, so a version bump is a new vendored file and nothing else.

What the Object carries differs from the file in three ways, none of which a server validates:
field descriptions are left out (they keep each rendered Object small), the file's empty
``status`` is dropped (the API server owns it), and the bundle-version annotation names the
release whose schema the file has. The vendored file is upstream main at a commit whose schema
equals release ``RELEASE`` (third_party/crds/SOURCES.md, note 2), and a cluster operator reads
that annotation to learn which release is installed.
"""

from __future__ import annotations

import copy
import functools
import pathlib
from typing import Any

import yaml

UPSTREAM = pathlib.Path(__file__).with_name("inferencepool_crd.yaml")
RELEASE = "v1.6.0"
BUNDLE_VERSION = "inference.networking.k8s.io/bundle-version"


def _without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


@functools.cache
def _parsed() -> dict[str, Any]:
    upstream = yaml.safe_load(UPSTREAM.read_text())
    crd: dict[str, Any] = _without_descriptions(upstream)
    crd.pop("status", None)
    crd["metadata"]["annotations"][BUNDLE_VERSION] = RELEASE
    return crd


def crd() -> dict[str, Any]:
    """A fresh copy of the CRD as InferenceCluster composes it."""
    return copy.deepcopy(_parsed())
