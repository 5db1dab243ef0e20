"""What of a tenant's pod templates plnt lets onto a workload cluster, beyond the schema's shape:
the resource names a container may ask for and the pod annotations a template may carry. The
ModelDeployment function refuses a spec that breaks them before it proposes anything, and the
ModelReplica function before it renders anything (a ModelReplica written by hand is checked
the same way); both read :func:`refusal`.

- Resources: ``cpu``, ``memory`` and ``ephemeral-storage`` only. Any other name (an extended
  resource such as ``nvidia.com/gpu``, ``hugepages-*``, a vendor's RDMA or FPGA device) takes
  something from the node the kubelet hands out outside DRA, which neither the binder nor an
  InferenceQuota counts: devices come only through DRA claims (``nodeSelector.devices`` on a
  ModelDeployment, ``deviceRequests`` on a ModelReplica), which the binder commits.
- Annotations: an allow-list. Pod annotations steer the node's runtime and the cluster's add-ons
  (an AppArmor or seccomp profile, a CNI's extra networks, a mesh's sidecar injection), so only
  the keys plnt itself reads and a few that only describe the pod pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from plnt import labels
from plnt.models.model_replica import EngineOf, PodTemplate, ResourceList, Serving

ALLOWED_RESOURCES = ("cpu", "memory", "ephemeral-storage")

# Keys plnt reads (the engine's readiness path, where weights are staged from and to, and the
# downloader's Secret in the pod's own namespace) and keys that only describe the pod to people
# and to metrics scrapers.
ALLOWED_ANNOTATIONS = frozenset(
    {
        labels.HEALTH_PATH,
        labels.WEIGHTS_URI,
        labels.WEIGHTS_PATH,
        labels.WEIGHTS_SECRET,
        "kubectl.kubernetes.io/default-container",
        "kubectl.kubernetes.io/default-logs-container",
        "description",
    }
)
ALLOWED_ANNOTATION_PREFIXES = ("prometheus.io/",)


@dataclasses.dataclass(frozen=True)
class Refusal:
    """What in a template is not allowed, the field it is in, and why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def annotation_allowed(key: str) -> bool:
    return key in ALLOWED_ANNOTATIONS or key.startswith(ALLOWED_ANNOTATION_PREFIXES)


def _resources(resources: ResourceList | None, container: str, at: str) -> Refusal | None:
    if resources is None:
        return None
    for field in ("limits", "requests"):
        for name in sorted(getattr(resources, field) or {}):
            if name not in ALLOWED_RESOURCES:
                return Refusal(
                    f'{at}.resources.{field}["{name}"]',
                    f"container {container} asks for {name}: a template's resources may carry "
                    f"only {', '.join(ALLOWED_RESOURCES)}: devices are taken only through the DRA "
                    "claims the binder counts",
                )
    return None


def _template(template: PodTemplate, at: str) -> Refusal | None:
    annotations = (template.metadata.annotations if template.metadata else None) or {}
    for key in sorted(annotations):
        if not annotation_allowed(key):
            return Refusal(
                f'{at}.metadata.annotations["{key}"]',
                "this pod annotation is not allowed (docs/tenancy.md lists the allowed ones: "
                f"{', '.join(sorted(ALLOWED_ANNOTATIONS))}, "
                f"{', '.join(p + '*' for p in ALLOWED_ANNOTATION_PREFIXES)})",
            )
    for k, container in enumerate(template.containers):
        refused = _resources(container.resources, container.name, f"{at}.spec.containers[{k}]")
        if refused:
            return refused
    return None


def refusal(
    engines: Sequence[EngineOf[Any]], serving: Serving, path: str = "spec"
) -> Refusal | None:
    """The first thing in the spec's pod templates (every engine member's, and the endpoint
    picker's) that plnt does not let onto a workload cluster, or None."""
    for i, engine in enumerate(engines):
        for j, member in enumerate(engine.members):
            refused = _template(member.template, f"{path}.engines[{i}].members[{j}].template")
            if refused:
                return refused
    picker = serving.endpoint_picker
    if picker:
        at = f"{path}.serving.endpointPicker.template.spec.containers"
        for k, container in enumerate(picker.template.spec.containers):
            refused = _resources(container.resources, container.name, f"{at}[{k}]")
            if refused:
                return refused
    return None
