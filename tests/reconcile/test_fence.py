"""The binder and a cluster's fence at commit time (docs/tenancy.md, "Fenced clusters").

The binder reads the fence from the InferenceCluster itself, never from the fleet view it
writes, so a proposal a stale view let through is refused; and the ModelDeployment function,
which reads the same object for the clusters it places on, draws the same line.
"""

from __future__ import annotations

from typing import Any

import pytest

from plnt import capacity
from plnt.capacity import admission, binding, commit, ledger, offer, scheduling
from tests.support import gpu_shape, spec_asking

GPUS_8 = gpu_shape(8)
NAME = admission.NAMESPACE_NAME_LABEL


def inference_cluster(fence: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodePools": [{"name": "h", "className": "h100", "nodeCount": 1}]}
    if fence is not None:
        spec["namespaceSelector"] = fence
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
            "metadata": {"name": "a"}, "spec": spec}  # fmt: skip


def proposal(namespace: str) -> dict[str, Any]:
    demand = {"h": (capacity.Pods(1, (("device:gpu", 1),)),)}
    return {
        "metadata": {
            "name": "r-0",
            "namespace": namespace,
            "uid": f"uid-{namespace}",
            "creationTimestamp": "t0",
            "annotations": {binding.DEMAND: capacity.demand_json(demand)},
        },
        "spec": spec_asking("a", demand),
    }


FENCES = {
    # name: (fence on cluster a, namespace, its labels, committed?)
    "no fence admits every namespace": (None, "team-b", {}, True),
    "an empty selector admits every namespace": ({}, "team-b", {}, True),
    "a label the namespace has": ({"matchLabels": {"team": "ml"}}, "team-b", {"team": "ml"}, True),
    "a label the namespace lacks": ({"matchLabels": {"team": "ml"}}, "team-b", {}, False),
    "the name label, not in": (
        {"matchExpressions": [{"key": NAME, "operator": "NotIn", "values": ["fenced-out"]}]},
        "fenced-out",
        {},
        False,
    ),
    "the name label, another namespace": (
        {"matchExpressions": [{"key": NAME, "operator": "NotIn", "values": ["fenced-out"]}]},
        "team-b",
        {},
        True,
    ),
}


@pytest.mark.parametrize(
    ("fence", "namespace", "labels", "committed"), FENCES.values(), ids=FENCES.keys()
)
def test_the_binder_commits_only_what_the_clusters_own_fence_admits(
    fence: dict[str, Any] | None, namespace: str, labels: dict[str, str], committed: bool
) -> None:
    clusters = {"a": inference_cluster(fence)}
    replicas = [commit.Replica.of(proposal(namespace))]
    refuse = commit.tenancy_refusals(replicas, clusters, {namespace: labels})
    d = commit.decide(
        ledger.Ledger(cluster="a"), replicas, {"h": capacity.Pool(1, GPUS_8)},
        alive={r.uid for r in replicas}, refuse=refuse,
    )  # fmt: skip
    key = f"{namespace}/r-0"
    assert (key in d.ledger.entries) is committed
    if committed:
        assert d.refused == {}
        return
    why = f"cluster a does not admit namespace {namespace}"
    assert d.refused == {key: why}
    refusal = binding.RefusalRecord.model_validate_json(d.annotate[key][binding.REFUSED])
    assert refusal.message == why
    assert binding.BINDING not in d.annotate[key]


@pytest.mark.parametrize(
    ("fence", "namespace", "labels", "committed"), FENCES.values(), ids=FENCES.keys()
)
def test_the_scheduler_and_the_binder_read_the_same_fence_alike(
    fence: dict[str, Any] | None, namespace: str, labels: dict[str, str], committed: bool
) -> None:
    """The function takes a cluster's fence from the InferenceCluster it reads by name
    (plnt.capacity.offer.cluster_of), the binder from the one it lists: one reading, one answer."""
    obj = inference_cluster(fence)
    ns_labels = admission.namespace_labels({"metadata": {"labels": labels}}, namespace)
    scheduler_admits = admission.admits(offer.cluster_of(obj).fence, ns_labels)
    replicas = [commit.Replica.of(proposal(namespace))]
    binder_admits = not commit.tenancy_refusals(replicas, {"a": obj}, {namespace: labels})
    assert scheduler_admits is binder_admits is committed
    assert scheduling.keep_pins(
        [scheduling.placed_replica(proposal(namespace))],
        {"a": offer.cluster_of(obj)},
        1,
        lambda c: admission.admits(c.fence, ns_labels),
    )[0] == ([scheduling.placed_replica(proposal(namespace))] if committed else [])
