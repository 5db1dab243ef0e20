"""What a placed replica becomes: a ModelReplica and, on a healthy cluster, a ModelEndpoint."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from plnt import capacity, contracts, labels, names, xp
from plnt.capacity import binding
from plnt.capacity.scheduling import Placement

MODEL_REPLICA = "ModelReplica"
MODEL_ENDPOINT = "ModelEndpoint"
OPENAI = "OpenAI"
NAME_REVISION_CHARS = 6


def replica_name(deployment: str, revision: str, index: int) -> str:
    """`<deployment>-<revision[:6]>-<index>`, shortened (with a hash) to stay a DNS label."""
    suffix = f"-{index}"
    return (
        names.dns_label(deployment, revision[:NAME_REVISION_CHARS], max_len=63 - len(suffix))
        + suffix
    )


def fresh_names(deployment: str, revision: str, taken: Iterable[str], count: int) -> list[str]:
    """`count` new replica names with the lowest indexes no existing replica uses."""
    used = set(taken)
    out: list[str] = []
    index = 0
    while len(out) < count:
        name = replica_name(deployment, revision, index)
        if name not in used:
            out.append(name)
            used.add(name)
        index += 1
    return out


def resource_name(replica: str) -> str:
    return f"replica-{replica}"


def endpoint_resource_name(replica: str) -> str:
    return f"endpoint-{replica}"


def replica_labels(deployment: str, revision: str, cluster: str) -> dict[str, str]:
    return {
        labels.DEPLOYMENT: labels.value(deployment),
        labels.REVISION: labels.value(revision),
        labels.CLUSTER: labels.value(cluster),
    }


def deployment_annotation(deployment: str) -> dict[str, str]:
    """The full deployment name, where its label value had to be shortened (ModelService
    reads it back to find the ModelDeployment)."""
    return {} if labels.value(deployment) == deployment else {labels.DEPLOYMENT: deployment}


# On a replica placed as a failover replacement: the degraded replica it replaces
REPLACES = "plnt.work/replaces"


def model_replica(
    *,
    name: str,
    namespace: str,
    deployment: str,
    revision: str,
    spec: Mapping[str, Any],
    placement: Placement,
) -> dict[str, Any]:
    """A new ModelReplica: the deployment's engines with each member pinned to its pool."""
    engines = []
    for raw, placed in zip(spec["engines"], placement.engines, strict=True):
        engine = copy.deepcopy(dict(raw))
        members = []
        for written, where in zip(engine.get("members") or [], placed.members, strict=True):
            member = {k: v for k, v in written.items() if k != "nodeSelector"}
            member["nodePoolName"] = where.pool
            if where.device_requests:
                member["deviceRequests"] = [dict(r) for r in where.device_requests]
            members.append(member)
        engine["members"] = members
        engines.append(engine)
    body: dict[str, Any] = {"clusterName": placement.cluster, "engines": engines}
    for field in ("serving", "modelCacheRef"):
        if spec.get(field) is not None:
            body[field] = copy.deepcopy(spec[field])
    return {
        "apiVersion": contracts.MODELPLANE_API_VERSION,
        "kind": MODEL_REPLICA,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": replica_labels(deployment, revision, placement.cluster),
            # The binder commits this demand; the ModelReplica renders once it has.
            "annotations": {binding.DEMAND: capacity.demand_json(placement.demand)},
        },
        "spec": body,
    }


def pinned_replica(observed: Mapping[str, Any]) -> dict[str, Any]:
    """A replica that keeps its pin: what was composed before, as it was."""
    meta = observed.get("metadata") or {}
    keep = {labels.DEPLOYMENT, labels.REVISION, labels.CLUSTER}
    out_meta: dict[str, Any] = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "labels": {k: v for k, v in (meta.get("labels") or {}).items() if k in keep},
    }
    annotations = meta.get("annotations") or {}
    # What the replica was proposed with stays; the binder's own annotations are its to write.
    kept = {k: annotations[k] for k in (binding.DEMAND, REPLACES) if k in annotations}
    if kept:
        out_meta["annotations"] = kept
    return {
        "apiVersion": contracts.MODELPLANE_API_VERSION,
        "kind": MODEL_REPLICA,
        "metadata": out_meta,
        "spec": xp.kept_spec(observed),
    }


def model_endpoint(
    *, replica: str, namespace: str, deployment: str, revision: str, cluster: str, address: str
) -> dict[str, Any]:
    """The OpenAI base URL of one replica behind its cluster's gateway."""
    path = f"/{namespace}/{replica}"
    return {
        "apiVersion": contracts.MODELPLANE_API_VERSION,
        "kind": MODEL_ENDPOINT,
        "metadata": {
            "name": replica,
            "namespace": namespace,
            "labels": replica_labels(deployment, revision, cluster) | {labels.API: OPENAI},
            **_annotations(deployment_annotation(deployment)),
        },
        "spec": {"url": f"http://{address}{path}", "rewritePath": f"{path}/"},
    }


def _annotations(annotations: dict[str, str]) -> dict[str, Any]:
    return {"annotations": annotations} if annotations else {}
