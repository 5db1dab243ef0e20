"""Typed ModelReplica spec (seed 002), mirroring apis/modelreplicas/definition.yaml.

Every bound, enum and pattern of the XRD is repeated here, strictly typed (no "3" for 3, no
explicit nulls: the API server would have rejected or pruned them), so the function defends
itself against input the API server never saw (``crossplane render``, a stale schema), and the
XRD's CEL rules are repeated by :func:`check_engines`, which raises ``xp.InvalidInput``
with the field path.

The shapes are layered for reuse: :class:`PodTemplate`, :class:`Serving`,
:class:`ModelCacheRef` and the generic :class:`EngineOf` / :class:`MemberBase` are shared
with ModelDeployment, whose members carry ``nodeSelector.devices`` instead of the
scheduler-resolved ``nodePoolName`` and ``deviceRequests`` of :class:`ReplicaMember`.
"""

from __future__ import annotations

import re
from typing import Any, Generic, Literal, TypeVar

from pydantic import Field, field_validator

from plnt import xp
from plnt.models.base import NonNullSpecModel

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A Kubernetes label value (the pool name becomes a nodeSelector value); pool names on
# InferenceCluster and CoreWeaveCluster are DNS labels of at most 40 characters, which fit.
LABEL_VALUE = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
# Kubernetes' resource.Quantity grammar (the pattern its own OpenAPI schema uses).
QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
ENGINE_CONTAINER = "engine"

Role = Literal["Standalone", "Leader", "Worker"]
Phase = Literal["Prefill", "Decode"]
ServingMode = Literal["Unified", "PrefillDecode"]


_Model = NonNullSpecModel


# `label_value` enforces LABEL_VALUE; the JSON schema states it (plnt's models against the XRDs).
LABEL_VALUE_SCHEMA: dict[str, Any] = {"pattern": LABEL_VALUE}


def label_value(cls: type, value: str) -> str:
    """A field validator: ``value`` must be a Kubernetes label value (fullmatch, so that a
    trailing newline does not slip past "$")."""
    if not re.fullmatch(LABEL_VALUE.strip("^$"), value):
        raise ValueError(f"must be a label value matching {LABEL_VALUE}")
    return value


# --- the curated PodTemplate ---------------------------------------------------------------


class KeyRef(_Model):
    key: str
    name: str
    optional: bool | None = None


class FieldRef(_Model):
    api_version: str | None = Field(default=None, alias="apiVersion")
    field_path: str = Field(alias="fieldPath")


class EnvVarSource(_Model):
    config_map_key_ref: KeyRef | None = Field(default=None, alias="configMapKeyRef")
    field_ref: FieldRef | None = Field(default=None, alias="fieldRef")
    secret_key_ref: KeyRef | None = Field(default=None, alias="secretKeyRef")


class EnvVar(_Model):
    name: str
    value: str | None = None
    value_from: EnvVarSource | None = Field(default=None, alias="valueFrom")


class ContainerPort(_Model):
    container_port: int = Field(alias="containerPort", ge=1, le=65535)
    name: str | None = Field(default=None, min_length=1, max_length=15, pattern=DNS_LABEL)


class HTTPGetAction(_Model):
    path: str | None = None
    port: int | str


class TCPSocketAction(_Model):
    port: int | str


class GRPCAction(_Model):
    port: int
    service: str | None = None


class Probe(_Model):
    failure_threshold: int | None = Field(default=None, alias="failureThreshold", ge=1)
    grpc: GRPCAction | None = None
    http_get: HTTPGetAction | None = Field(default=None, alias="httpGet")
    initial_delay_seconds: int | None = Field(default=None, alias="initialDelaySeconds")
    period_seconds: int | None = Field(default=None, alias="periodSeconds", ge=1)
    success_threshold: int | None = Field(default=None, alias="successThreshold", ge=1)
    tcp_socket: TCPSocketAction | None = Field(default=None, alias="tcpSocket")
    timeout_seconds: int | None = Field(default=None, alias="timeoutSeconds", ge=1)


class ResourceList(_Model):
    limits: dict[str, int | str] | None = None
    requests: dict[str, int | str] | None = None


class Container(_Model):
    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    image: str = Field(min_length=1)
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    ports: list[ContainerPort] | None = Field(default=None, max_length=8)
    readiness_probe: Probe | None = Field(default=None, alias="readinessProbe")
    resources: ResourceList | None = None

    def http_port(self, default: int = 8000) -> int:
        """The port Modelplane probes and serves: a port named ``http``, else ``default``."""
        for port in self.ports or []:
            if port.name == "http":
                return port.container_port
        return default


class LocalObjectReference(_Model):
    name: str


class PodSpec(_Model):
    containers: list[Container] = Field(min_length=1, max_length=8)
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None, alias="imagePullSecrets"
    )

    def container(self, name: str) -> Container | None:
        return next((c for c in self.containers if c.name == name), None)


class PodMetadata(_Model):
    """Passed to the pods unchanged, so held to what ObjectMeta validation holds them to: the
    XRD checks label values, the keys (which an OpenAPI schema cannot) are checked here."""

    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None

    @field_validator("labels")
    @classmethod
    def _labels_are_labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            _check_key(key)
            if item and (len(item) > 63 or not re.fullmatch(LABEL_VALUE.strip("^$"), item)):
                raise ValueError(f"{key}: {item!r} is not a label value")
        return value

    @field_validator("annotations")
    @classmethod
    def _annotation_keys_are_qualified(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            _check_key(key)
        return value


_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _check_key(key: str) -> None:
    """A label or annotation key: [DNS subdomain prefix/]name, the name at most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    bad_prefix = slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix))
    if bad_prefix or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        raise ValueError(f"{key!r} is not a qualified key ([DNS subdomain/]name)")


class PodTemplate(_Model):
    """A curated subset of PodTemplateSpec: the pod shape a member's engine pods take."""

    metadata: PodMetadata | None = None
    spec: PodSpec | None = None  # optional in the seed; check_template requires the engine

    @property
    def containers(self) -> list[Container]:
        return self.spec.containers if self.spec else []

    @property
    def image_pull_secrets(self) -> list[LocalObjectReference]:
        return (self.spec.image_pull_secrets if self.spec else None) or []

    @property
    def engine(self) -> Container:
        engine = next((c for c in self.containers if c.name == ENGINE_CONTAINER), None)
        if engine is None:  # check_engines rejects this first; keeps the type honest
            raise xp.InvalidInput("template.spec.containers", "no container named engine")
        return engine


# --- engines ---------------------------------------------------------------------------------


class DeviceSelector(_Model):
    cel: str | None = Field(default=None, min_length=1, max_length=10240)


class DeviceRequest(_Model):
    name: str = Field(min_length=1, max_length=63)
    count: int = Field(default=1, ge=1, le=64)
    device_class_name: str = Field(alias="deviceClassName", min_length=1, max_length=253)
    selectors: list[DeviceSelector] | None = Field(default=None, max_length=8)


class Worker(_Model):
    nodes: int = Field(ge=1, le=63)


class MemberBase(_Model):
    """What every engine member has, in a ModelReplica and a ModelDeployment alike."""

    role: Role = "Standalone"
    template: PodTemplate
    worker: Worker | None = None

    @property
    def serves(self) -> bool:
        """Standalone and Leader pods serve requests; Worker pods only hold ranks."""
        return self.role != "Worker"

    @property
    def pods(self) -> int:
        """Pods one copy of this member runs."""
        return self.worker.nodes if self.role == "Worker" and self.worker else 1


class ReplicaMember(MemberBase):
    """A member with the scheduler's placement resolved: its pool and DRA device requests."""

    node_pool_name: str = Field(
        alias="nodePoolName", min_length=1, max_length=63, json_schema_extra=LABEL_VALUE_SCHEMA
    )
    device_requests: list[DeviceRequest] | None = Field(
        default=None, alias="deviceRequests", min_length=1, max_length=16
    )

    _pool_is_label_value = field_validator("node_pool_name")(label_value)


MemberT = TypeVar("MemberT", bound=MemberBase)


class EngineOf(_Model, Generic[MemberT]):
    name: str = Field(  # a label value on the engine's pods
        min_length=1, max_length=63, json_schema_extra=LABEL_VALUE_SCHEMA
    )
    _name_is_label_value = field_validator("name")(label_value)
    copies: int = Field(default=1, ge=1, le=64)
    phase: Phase | None = None
    members: list[MemberT] = Field(min_length=1, max_length=2)

    def member(self, role: Role) -> MemberT | None:
        return next((m for m in self.members if m.role == role), None)

    @property
    def serving_member(self) -> MemberT:
        """The member whose pods serve: the Standalone one, or the Leader of a gang."""
        return next(m for m in self.members if m.serves)

    @property
    def is_gang(self) -> bool:
        return any(m.role == "Leader" for m in self.members)


ReplicaEngine = EngineOf[ReplicaMember]


# --- serving and cache -----------------------------------------------------------------------


class PickerContainer(_Model):
    name: str = Field(min_length=1, max_length=63)
    image: str = Field(min_length=1)
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    resources: ResourceList | None = None


class PickerPodSpec(_Model):
    containers: list[PickerContainer] = Field(min_length=1, max_length=1)
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None, alias="imagePullSecrets"
    )


class PickerTemplate(_Model):
    spec: PickerPodSpec


class EndpointPicker(_Model):
    config: dict[str, Any] | None = None
    template: PickerTemplate


class Serving(_Model):
    mode: ServingMode = "Unified"
    router: Literal["EndpointPicker"] | None = None
    endpoint_picker: EndpointPicker | None = Field(default=None, alias="endpointPicker")


class ModelCacheRef(_Model):
    name: str = Field(min_length=1)


class ModelReplicaSpec(_Model):
    cluster_name: str = Field(alias="clusterName", min_length=1)
    engines: list[ReplicaEngine] = Field(min_length=1, max_length=8)
    model_cache_ref: ModelCacheRef | None = Field(default=None, alias="modelCacheRef")
    serving: Serving = Field(default_factory=Serving)


# --- the XRD's CEL rules, repeated -------------------------------------------------------------


def check_engines(engines: list[EngineOf[Any]], serving: Serving, path: str = "spec") -> None:
    """Raises InvalidInput (with the field path) for input the XRD's CEL rules reject."""
    names = [e.name for e in engines]
    for i, engine in enumerate(engines):
        at = f"{path}.engines[{i}]"
        if names.index(engine.name) != i:
            raise xp.InvalidInput(f"{at}.name", f"engine names must be unique: {engine.name}")
        check_members(engine.members, f"{at}.members")
        if engine.phase is not None and serving.mode != "PrefillDecode":
            raise xp.InvalidInput(
                f"{at}.phase", "phase is only allowed when serving.mode is PrefillDecode"
            )
    if serving.mode == "PrefillDecode":
        phases = [e.phase for e in engines if e.phase is not None]
        if len(phases) != len(engines) or sorted(phases) != ["Decode", "Prefill"]:
            raise xp.InvalidInput(
                f"{path}.engines",
                "serving.mode PrefillDecode needs every engine to have a phase, "
                "with exactly one Prefill and one Decode engine",
            )


def check_members(members: list[MemberBase], path: str) -> None:
    roles = sorted(m.role for m in members)
    if roles not in (["Standalone"], ["Leader", "Worker"]):
        raise xp.InvalidInput(
            path, "an engine is exactly one Standalone member, or one Leader and one Worker"
        )
    for j, member in enumerate(members):
        at = f"{path}[{j}]"
        if (member.worker is not None) != (member.role == "Worker"):
            raise xp.InvalidInput(
                f"{at}.worker", "worker is required on a Worker member and allowed on no other"
            )
        requests = [r.name for r in getattr(member, "device_requests", None) or []]
        for k, name in enumerate(requests):
            if requests.index(name) != k:
                raise xp.InvalidInput(
                    f"{at}.deviceRequests[{k}].name", f"request names must be unique: {name}"
                )
        check_template(member.template, f"{at}.template")


def check_template(template: PodTemplate, path: str) -> None:
    containers = template.containers
    names = [c.name for c in containers]
    for k, container in enumerate(containers):
        if names.index(container.name) != k:
            raise xp.InvalidInput(
                f"{path}.spec.containers[{k}].name",
                f"container names must be unique: {container.name}",
            )
    engine = next((c for c in containers if c.name == ENGINE_CONTAINER), None)
    if engine is None:
        raise xp.InvalidInput(
            f"{path}.spec.containers", "the engine container must be named engine"
        )
    if engine.readiness_probe is not None:
        k = names.index(ENGINE_CONTAINER)
        raise xp.InvalidInput(
            f"{path}.spec.containers[{k}].readinessProbe",
            "the engine container may not set a readinessProbe: Modelplane probes its http port",
        )
    for k, container in enumerate(containers):
        for field, values in (container.resources.dump() if container.resources else {}).items():
            for resource, value in values.items():
                if isinstance(value, str) and not _is_quantity(value):
                    raise xp.InvalidInput(
                        f"{path}.spec.containers[{k}].resources.{field}.{resource}",
                        f"not a quantity: {value!r}",
                    )


_QUANTITY = re.compile(QUANTITY)


def _is_quantity(value: str) -> bool:
    return _QUANTITY.fullmatch(value) is not None
