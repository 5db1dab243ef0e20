"""Weights staged into an engine's own pods by an init container, before the engine starts.

A member's pod template annotations ask for it (a WorkflowRun sets them from
``model.storageUri``): ``plnt.work/weights-uri`` (where from), ``plnt.work/weights-path``
(where the engine reads them; default ``/models``) and, optionally,
``plnt.work/weights-secret`` (a Secret in the replica's namespace whose keys become the
downloader's environment through ``envFrom``: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``HF_TOKEN``, ...; no Secret means the pod's workload identity or a public source).

Every pod of that member then gets an ``emptyDir`` volume ``weights``, an init container
``stage-weights`` running the scheme's downloader from ``plnt.weights`` (the ModelCache Job's
table) into it, and the engine container mounting it read-only at the same path (engines
only read their weights). In a gang a member without the annotation takes its engine's other
member's: every Worker rank loads its shard from the same weights. With ``modelCacheRef`` the
cache wins: no init container (the function says so in a warning).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

from plnt import labels, weights, xp
from plnt.models.model_replica import MemberBase, ModelReplicaSpec, ReplicaEngine

VOLUME = "weights"
INIT_CONTAINER = "stage-weights"
DEFAULT_PATH = "/models"
# What the downloader asks of the node; the pod's request is the larger of this and the engines'.
RESOURCES = {"requests": {"cpu": "1", "memory": "2Gi"}}
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclasses.dataclass(frozen=True)
class Staging:
    uri: str
    path: str
    secret: str | None = None


def _annotations(member: MemberBase) -> dict[str, str]:
    meta = member.template.metadata
    return dict((meta.annotations if meta else None) or {})


def _own(member: MemberBase) -> Staging | None:
    found = _annotations(member)
    uri = found.get(labels.WEIGHTS_URI)
    if uri is None:
        return None
    path = found.get(labels.WEIGHTS_PATH) or DEFAULT_PATH
    return Staging(uri=uri, path=path, secret=found.get(labels.WEIGHTS_SECRET) or None)


def of(engine: ReplicaEngine, member: MemberBase) -> Staging | None:
    """What this member's pods stage: its own annotations, else (in a gang) its partner's."""
    own = _own(member)
    if own is not None or not engine.is_gang:
        return own
    return next((s for m in engine.members if m is not member and (s := _own(m))), None)


def stages(spec: ModelReplicaSpec, engine: ReplicaEngine) -> Staging | None:
    """The engine's staging when its pods run the init container (never with a cache)."""
    if spec.model_cache_ref is not None:
        return None
    return next((s for m in engine.members if (s := of(engine, m))), None)


def check(spec: ModelReplicaSpec, path: str = "spec") -> None:
    """Raises InvalidInput naming the annotation for a URI no downloader can stage, a path the
    engine cannot mount, or a Secret name Kubernetes would reject."""
    for i, engine in enumerate(spec.engines):
        for j, member in enumerate(engine.members):
            at = f"{path}.engines[{i}].members[{j}].template"
            found = _annotations(member)
            if labels.WEIGHTS_URI not in found:
                continue
            field = f"{at}.metadata.annotations"
            why = weights.unsupported(found[labels.WEIGHTS_URI])
            if why:
                raise xp.InvalidInput(f'{field}["{labels.WEIGHTS_URI}"]', why)
            mount = found.get(labels.WEIGHTS_PATH) or DEFAULT_PATH
            if not _mountable(mount):
                raise xp.InvalidInput(
                    f'{field}["{labels.WEIGHTS_PATH}"]',
                    f"{mount!r} is not an absolute path below / without '..' or ':'",
                )
            secret = found.get(labels.WEIGHTS_SECRET)
            if secret is not None and not (len(secret) <= 253 and DNS_SUBDOMAIN.match(secret)):
                raise xp.InvalidInput(
                    f'{field}["{labels.WEIGHTS_SECRET}"]', f"{secret!r} is not a Secret name"
                )
            for k, container in enumerate(member.template.containers):
                if container.name == INIT_CONTAINER:
                    raise xp.InvalidInput(
                        f"{at}.spec.containers[{k}].name",
                        f"{INIT_CONTAINER} is the weights init container's name",
                    )


def _mountable(path: str) -> bool:
    parts = path.split("/")
    return (
        path.startswith("/")
        and path.rstrip("/") != ""
        and ".." not in parts
        and ":" not in path
        and len(path) <= 4096
    )


def init_container(staging: Staging) -> dict[str, Any]:
    """The scheme's downloader, filling the weights volume before the engine starts."""
    downloader = weights.DOWNLOADERS[weights.scheme(staging.uri)]
    container: dict[str, Any] = {
        "name": INIT_CONTAINER,
        "image": downloader.image,
        "command": downloader.command,
        "env": weights.source_env(staging.uri, staging.path),
        "volumeMounts": [{"name": VOLUME, "mountPath": staging.path}],
        "resources": copy.deepcopy(RESOURCES),
    }
    if staging.secret:
        container["envFrom"] = [{"secretRef": {"name": staging.secret}}]
    return container


def engine_mount(staging: Staging) -> dict[str, Any]:
    return {"name": VOLUME, "mountPath": staging.path, "readOnly": True}


def volume() -> dict[str, Any]:
    """Node-local scratch that lives as long as the pod: the node must hold the weights."""
    return {"name": VOLUME, "emptyDir": {}}
