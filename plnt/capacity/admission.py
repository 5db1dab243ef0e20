"""Admission: which namespaces an InferenceCluster admits (its fence), read one way for every
reader: the ModelDeployment function's scheduler before it proposes, the binder before it
commits, and the ModelCache function before it stages.

A fence is an InferenceCluster's `spec.namespaceSelector`, a label selector over the labels of
Namespaces; an absent or empty one admits every namespace. `admits` is the one reading of it.

Invariant: a replica is committed to a cluster only if the cluster's fence admits the replica's
namespace, as `admits` reads the namespace's labels (`namespace_labels`) at commit time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # every Namespace carries it


def admits(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions) on `labels`; None or absent
    selects everything, an empty selector too (as Kubernetes reads one)."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for req in selector.get("matchExpressions") or []:
        key, op = req.get("key", ""), req.get("operator", "")
        values = req.get("values") or []
        present = key in labels
        holds = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(op, False)
        if not holds:
            return False
    return True


def namespace_labels(namespace: Mapping[str, Any] | None, name: str) -> dict[str, str]:
    """A Namespace's labels; the name label Kubernetes sets on every one is always there."""
    labels = dict(((namespace or {}).get("metadata") or {}).get("labels") or {})
    labels[NAMESPACE_NAME_LABEL] = name
    return labels


def fence_message(cluster: str, namespace: str) -> str:
    return f"cluster {cluster} does not admit namespace {namespace}"
