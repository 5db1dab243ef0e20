"""What a starting engine's pods are waiting for: the scheduler, their weights, or the engine.

An observed Deployment or LeaderWorkerSet counts available copies; it cannot tell a pod the
kube-scheduler cannot place from an init container downloading weights or an engine loading
them (all are "not available"). While an engine has fewer available copies than it wants and
its workload has created pods, the replica composes an ObservedObjectCollection over that
engine's pods: provider-kubernetes keeps one observe-only Object per matching pod in the
replica's namespace, labelled with the collection's name, and the function requires those
Objects, whose observed manifests carry the pods' conditions (PodScheduled False, reason
Unschedulable, with the scheduler's message) and init container states. The collection is
dropped once every copy is available (its Objects go with it by owner reference; observe-only,
they never touch the pods).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from functions.model_replica import staging
from functions.model_replica.replica import OBJECT_API_VERSION, Replica, observed_manifest
from plnt import labels
from plnt.models.model_replica import ReplicaEngine

# provider-kubernetes labels each Object it keeps for a collection with the collection's name
MEMBERSHIP_LABEL = "kubernetes.crossplane.io/owned-by-collection"


def resource_name(engine: ReplicaEngine) -> str:
    """The composed resource name of the engine's collection (and of its requirement)."""
    return f"pods-{engine.name}"


def collection_name(replica: Replica, engine: ReplicaEngine) -> str:
    # a label value too (MEMBERSHIP_LABEL), so 63 characters at most
    return labels.value(f"{replica.name}-{engine.name}-pods")


def collection(replica: Replica, engine: ReplicaEngine) -> dict[str, Any]:
    return {
        "apiVersion": OBJECT_API_VERSION,
        "kind": "ObservedObjectCollection",
        "metadata": {"name": collection_name(replica, engine)},
        "spec": {
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": replica.provider_config},
            "observeObjects": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": replica.namespace,
                "selector": {"matchLabels": {**replica.selector(), labels.ENGINE: engine.name}},
            },
        },
    }


@dataclass(frozen=True)
class Unschedulable:
    """A pod the kube-scheduler cannot place, and the scheduler's message saying why."""

    pod: str
    message: str


def unschedulable(members: Sequence[dict[str, Any]] | None) -> Unschedulable | None:
    """The first observed pod (by name) whose PodScheduled condition is False with reason
    Unschedulable, or None when every observed pod is scheduled or waits for the scheduler."""
    found = []
    for member in members or []:
        pod = observed_manifest(member)
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if (
                isinstance(cond, dict)
                and cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"
            ):
                found.append(Unschedulable(_pod_name(member, pod), str(cond.get("message") or "")))
                break
    return min(found, key=lambda u: u.pod) if found else None


def _pod_name(member: dict[str, Any], pod: dict[str, Any]) -> str:
    """The pod's own name; the Object's when its observed manifest has none."""
    desired = ((member.get("spec") or {}).get("forProvider") or {}).get("manifest") or {}
    for meta in (pod.get("metadata"), desired.get("metadata"), member.get("metadata")):
        if isinstance(meta, dict) and meta.get("name"):
            return str(meta["name"])
    return ""


def placed(members: Sequence[dict[str, Any]] | None) -> bool:
    """Every observed pod is bound to a node (PodScheduled True): its containers start there.
    False while no pod has been observed yet."""
    pods = [observed_manifest(m) for m in members or []]
    pods = [p for p in pods if p]
    return bool(pods) and all(_scheduled(p) for p in pods)


def _scheduled(pod: dict[str, Any]) -> bool:
    return any(
        isinstance(cond, dict)
        and cond.get("type") == "PodScheduled"
        and cond.get("status") == "True"
        for cond in (pod.get("status") or {}).get("conditions") or []
    )


def weights_staged(members: Sequence[dict[str, Any]] | None) -> bool:
    """Every observed pod's weights init container has finished; False while any still runs,
    or while no pod has been observed yet (the engine cannot load what is not staged)."""
    pods = [observed_manifest(m) for m in members or []]
    pods = [p for p in pods if p]
    return bool(pods) and all(_init_finished(p) for p in pods)


def _init_finished(pod: dict[str, Any]) -> bool:
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if isinstance(status, dict) and status.get("name") == staging.INIT_CONTAINER:
            terminated = (status.get("state") or {}).get("terminated") or {}
            return terminated.get("exitCode") == 0
    return False
