"""An engine's pods and the workload that runs them.

Per member with device requests, a ``resource.k8s.io/v1`` ResourceClaimTemplate (one
DeviceRequest per request, CEL copied verbatim). A Standalone engine is an ``apps/v1``
Deployment (replicas = copies; one copy replaced at a time and no surge, so a rollout never
needs a spare GPU node); a Leader + Worker engine is a ``leaderworkerset.x-k8s.io/v1``
LeaderWorkerSet (size = 1 + worker.nodes, replicas = copies).

Every pod: nodeSelector on its pool, tolerations for plnt's pool taints (the nodeSelector,
not the tolerations, decides placement), the member's claim beside the engine container's
CPU/memory, a readiness probe on the engine's http port, ``MODELPLANE_LEADER_ADDRESS`` and
``MODELPLANE_RANK`` (aliases of LWS's variables in a gang; a Standalone pod is its own leader
at its pod IP, rank 0), and plnt's labels. The user's env, command, args, ports, resources,
imagePullSecrets and template metadata pass through unchanged (resources and annotations only
as plnt.pod_policy allows them: the function refuses the replica otherwise); plnt's labels win
a clash.
A member whose template annotations name weights stages them with an init container into an
emptyDir the engine mounts read-only (staging.py); a ModelCache's PVC wins over it.
"""

from __future__ import annotations

import copy
from typing import Any

from functions.model_replica import serving, staging
from functions.model_replica.replica import LWS_NAME_MAX, Replica
from plnt import labels, workload_cluster
from plnt.models.model_replica import ENGINE_CONTAINER, ReplicaEngine, ReplicaMember

CLAIM_NAME = "devices"  # the pod-level claim holding every device request of a member
MODEL_CACHE_VOLUME = "model-cache"
MODEL_CACHE_MOUNT = "/models"
READINESS_PATH = "/health"


def claim_template_name(replica: Replica, engine: ReplicaEngine, member: ReplicaMember) -> str:
    return replica.resource_name(engine.name, member.role.lower())


def workload_name(replica: Replica, engine: ReplicaEngine) -> str:
    return replica.resource_name(engine.name, max_len=LWS_NAME_MAX if engine.is_gang else 63)


def resource_claim_template(
    replica: Replica, engine: ReplicaEngine, member: ReplicaMember
) -> dict[str, Any] | None:
    """The member's DRA claim template, or None when it requests no devices."""
    if not member.device_requests:
        return None
    requests = []
    for request in member.device_requests:
        exactly: dict[str, Any] = {
            "deviceClassName": request.device_class_name,
            "allocationMode": "ExactCount",
            "count": request.count,
        }
        selectors = [{"cel": {"expression": s.cel}} for s in request.selectors or [] if s.cel]
        if selectors:
            exactly["selectors"] = selectors
        requests.append({"name": request.name, "exactly": exactly})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": replica.metadata(
            claim_template_name(replica, engine, member),
            **{labels.ENGINE: engine.name, labels.ROLE: member.role},
        ),
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


def pod_labels(replica: Replica, engine: ReplicaEngine, member: ReplicaMember) -> dict[str, str]:
    out = {
        **replica.common_labels(),
        labels.ENGINE: engine.name,
        labels.ROLE: member.role,
    }
    if member.serves:
        out[labels.SERVING] = "true"
    if replica.prefill_decode and engine.phase:
        out[labels.PHASE] = engine.phase
        if member.serves:
            out.update(serving.phase_labels(engine.phase))
    return out


def _rank_env(gang: bool) -> list[dict[str, Any]]:
    if gang:
        return [
            {"name": "MODELPLANE_LEADER_ADDRESS", "value": "$(LWS_LEADER_ADDRESS)"},
            {"name": "MODELPLANE_RANK", "value": "$(LWS_WORKER_INDEX)"},
        ]
    return [
        {
            "name": "MODELPLANE_LEADER_ADDRESS",
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
        },
        {"name": "MODELPLANE_RANK", "value": "0"},
    ]


def _container(
    raw: dict[str, Any], *, rank_env: list[dict[str, Any]], engine: dict[str, Any] | None
) -> dict[str, Any]:
    """One user container with plnt's additions; ``engine`` holds the engine-only ones."""
    out = copy.deepcopy(raw)
    user_env = out.get("env") or []
    taken = {e["name"] for e in user_env}
    env = [e for e in rank_env if e["name"] not in taken] + user_env
    out["env"] = env
    if engine is not None:
        extra = dict(engine)
        claims = extra.pop("resources", None)
        out.update(extra)
        if claims:
            out["resources"] = {**(out.get("resources") or {}), **claims}
    return out


def pod_template(replica: Replica, engine: ReplicaEngine, member: ReplicaMember) -> dict[str, Any]:
    """The member's pod template: the user's containers plus everything plnt injects."""
    template = member.template
    http_port = template.engine.http_port()
    stage = None if replica.spec.model_cache_ref else staging.of(engine, member)
    engine_extra = _engine_extra(replica, member, stage, http_port)
    rank_env = _rank_env(engine.is_gang)
    containers = [
        _container(
            c.dump(),
            rank_env=rank_env,
            engine=engine_extra if c.name == ENGINE_CONTAINER else None,
        )
        for c in template.containers
    ]

    spec: dict[str, Any] = {
        "containers": containers,
        "nodeSelector": {labels.POOL: member.node_pool_name},
        # every pool taint: the nodeSelector, not a toleration, pins the pool
        "tolerations": workload_cluster.pool_tolerations(),
    }
    init_containers = [staging.init_container(stage)] if stage else []
    if replica.prefill_decode and engine.phase == "Decode" and member.serves:
        init_containers.append(serving.routing_sidecar(replica, http_port))
    if init_containers:  # weights first: the sidecar starts once they are in place
        spec["initContainers"] = init_containers
    if template.image_pull_secrets:
        spec["imagePullSecrets"] = [s.dump() for s in template.image_pull_secrets]
    spec |= _claims_and_volumes(replica, engine, member, stage)
    return {"metadata": _pod_metadata(replica, engine, member), "spec": spec}


def _engine_extra(
    replica: Replica, member: ReplicaMember, stage: staging.Staging | None, http_port: int
) -> dict[str, Any]:
    """What plnt adds to the engine container: its device claim, a readiness probe where it
    serves, and the weights' mount (the ModelCache's, else the staged volume's)."""
    extra: dict[str, Any] = {}
    if member.device_requests:
        extra["resources"] = {"claims": [{"name": CLAIM_NAME}]}
    if member.serves or any(p.name == "http" for p in member.template.engine.ports or []):
        # A Worker rank serves nothing unless it says so with a port named http.
        extra["readinessProbe"] = {
            "httpGet": {"path": READINESS_PATH, "port": http_port},
            "periodSeconds": 10,
            "failureThreshold": 3,
        }
    if replica.pvc_name:
        extra["volumeMounts"] = [
            {"name": MODEL_CACHE_VOLUME, "mountPath": MODEL_CACHE_MOUNT, "readOnly": True}
        ]
    elif stage:
        extra["volumeMounts"] = [staging.engine_mount(stage)]
    return extra


def _claims_and_volumes(
    replica: Replica, engine: ReplicaEngine, member: ReplicaMember, stage: staging.Staging | None
) -> dict[str, Any]:
    """The pod's resource claim (its devices) and volume (the ModelCache's PVC, else the
    staged weights')."""
    out: dict[str, Any] = {}
    if member.device_requests:
        out["resourceClaims"] = [
            {
                "name": CLAIM_NAME,
                "resourceClaimTemplateName": claim_template_name(replica, engine, member),
            }
        ]
    if replica.pvc_name:
        out["volumes"] = [
            {
                "name": MODEL_CACHE_VOLUME,
                "persistentVolumeClaim": {"claimName": replica.pvc_name, "readOnly": True},
            }
        ]
    elif stage:
        out["volumes"] = [staging.volume()]
    return out


def _pod_metadata(replica: Replica, engine: ReplicaEngine, member: ReplicaMember) -> dict[str, Any]:
    """The user's labels and annotations, with plnt's labels over them."""
    template = member.template
    user_meta = template.metadata.dump() if template.metadata else {}
    metadata: dict[str, Any] = {
        "labels": {**(user_meta.get("labels") or {}), **pod_labels(replica, engine, member)}
    }
    if user_meta.get("annotations"):
        metadata["annotations"] = user_meta["annotations"]
    return metadata


def deployment(replica: Replica, engine: ReplicaEngine) -> dict[str, Any]:
    """A Standalone engine: one pod per copy, replaced one at a time without surge."""
    member = engine.serving_member
    selector = {**replica.selector(), labels.ENGINE: engine.name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": replica.metadata(
            workload_name(replica, engine), **{labels.ENGINE: engine.name}
        ),
        "spec": {
            "replicas": engine.copies,
            "selector": {"matchLabels": selector},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "template": pod_template(replica, engine, member),
        },
    }


def leader_worker_set(replica: Replica, engine: ReplicaEngine) -> dict[str, Any]:
    """A Leader + Worker engine: one group of 1 + worker.nodes pods per copy."""
    leader = engine.member("Leader")
    worker = engine.member("Worker")
    assert leader is not None and worker is not None and worker.worker is not None
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": replica.metadata(
            workload_name(replica, engine), **{labels.ENGINE: engine.name}
        ),
        "spec": {
            "replicas": engine.copies,
            "leaderWorkerTemplate": {
                "size": 1 + worker.worker.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod_template(replica, engine, leader),
                "workerTemplate": pod_template(replica, engine, worker),
            },
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "startupPolicy": "LeaderCreated",
        },
    }


def workload(replica: Replica, engine: ReplicaEngine) -> dict[str, Any]:
    return (leader_worker_set if engine.is_gang else deployment)(replica, engine)


def status_count(manifest: dict[str, Any], key: str) -> int:
    """A count from an observed manifest's status, 0 when absent or no count: the observed
    manifest is whatever the cluster returned, unchecked by any schema of ours (numbers arrive
    as floats through the protobuf Struct)."""
    status = manifest.get("status")
    value = status.get(key) if isinstance(status, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value) if value >= 0 and float(value).is_integer() else 0


# The status field saying how many copies a workload has available.
AVAILABLE_COPIES: dict[str, str] = {
    "Deployment": "availableReplicas",
    "LeaderWorkerSet": "readyReplicas",
}


def _copies(manifest: dict[str, Any], fields: dict[str, str]) -> int:
    kind = manifest.get("kind")
    key = fields.get(kind) if isinstance(kind, str) else None
    return status_count(manifest, key) if key else 0


def available_copies(manifest: dict[str, Any]) -> int:
    """Available copies in an observed workload manifest (0 when it was never observed)."""
    return _copies(manifest, AVAILABLE_COPIES)


# The status field saying how many copies a workload has created pods for (scheduled or not).
CREATED_COPIES: dict[str, str] = {
    "Deployment": "replicas",
    "LeaderWorkerSet": "replicas",
}


def created_copies(manifest: dict[str, Any]) -> int:
    """Copies with pods in an observed workload manifest (0 when it was never observed)."""
    return _copies(manifest, CREATED_COPIES)
