"""A replica's serving surface on its cluster's Gateway, the same shape in both serving modes.

Seed 002: "Both modes front the serving pods with an InferencePool and an endpoint picker,
which endpointPicker can configure." So every replica gets an ``inference.networking.k8s.io/v1``
InferencePool over its serving (Standalone/Leader) pods, the router ``serving.router`` names in
front of it (``EndpointPicker``, the only one and the default: llm-d's inference scheduler as a
Deployment with its EndpointPickerConfig in its ``--config-text`` flag, and its Service; it runs
as the namespace's ``plnt-endpoint-picker`` ServiceAccount, which the InferenceCluster composes
once per namespace with what it may read), and an HTTPRoute on the cluster Gateway matching
``/<namespace>/<replica>/``, rewritten to ``/``, whose backend is the pool.

What differs by mode is a table (``MODES``): the port the pool targets and the picker's default
config. Unified: the engines' shared http port, and one scheduling profile that scores queue
depth, KV-cache use and prefix-cache hits. PrefillDecode (llm-d's disaggregation): port 8000 and
the P/D profiles. Serving pods carry ``llm-d.ai/role: prefill|decode``, which the picker's
prefill/decode filters select on. The decode pod runs llm-d's routing sidecar as a native
sidecar on port 8000: it sends the prompt to the prefill pod the picker chose
(``x-prefiller-host-port``) and forwards decode to the engine on its own http port, so the
decode engine must not listen on 8000, and the prefill engine must (it is reached on the pool's
target port). See docs/model-replica.md.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import yaml

from functions.model_replica.replica import SERVING_PORT, Replica
from plnt import labels, workload_cluster, xp
from plnt.models.model_replica import ModelReplicaSpec

GATEWAY_PARENT = {
    "group": "gateway.networking.k8s.io",
    "kind": "Gateway",
    "name": "plnt-inference",
    "namespace": "plnt-system",
}
COMPONENT = "app.kubernetes.io/component"
LLMD_ROLE = "llm-d.ai/role"
PHASE_ROLES = {"Prefill": "prefill", "Decode": "decode"}

ROUTING_SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-routing-sidecar:v0.3.0"
ROUTING_SIDECAR_CONNECTOR = "nixlv2"
EPP_IMAGE = "ghcr.io/llm-d/llm-d-inference-scheduler:v0.3.2"
EPP_GRPC_PORT = 9002
EPP_HEALTH_PORT = 9003
EPP_METRICS_PORT = 9090

_PROFILE_PLUGINS = [
    {"pluginRef": "queue-scorer", "weight": 1},
    {"pluginRef": "prefix-cache-scorer", "weight": 2},
    {"pluginRef": "max-score-picker"},
]
EPP_CONFIG_API = "inference.networking.x-k8s.io/v1alpha1"
# Unified: one profile over every serving pod, scoring short queues, free KV cache and prefix
# cache hits (plugins of the Inference Extension v1.0 that llm-d's scheduler v0.3 embeds).
UNIFIED_EPP_CONFIG: dict[str, Any] = {
    "apiVersion": EPP_CONFIG_API,
    "kind": "EndpointPickerConfig",
    "plugins": [
        {"type": "single-profile-handler"},
        {"type": "queue-scorer"},
        {"type": "kv-cache-utilization-scorer"},
        {"type": "prefix-cache-scorer"},
        {"type": "max-score-picker"},
    ],
    "schedulingProfiles": [
        {
            "name": "default",
            "plugins": [
                {"pluginRef": "queue-scorer", "weight": 1},
                {"pluginRef": "kv-cache-utilization-scorer", "weight": 1},
                {"pluginRef": "prefix-cache-scorer", "weight": 2},
                {"pluginRef": "max-score-picker"},
            ],
        }
    ],
}
# llm-d's P/D recipe: pick a decode pod and, for every request (threshold 0), a prefill pod.
PREFILL_DECODE_EPP_CONFIG: dict[str, Any] = {
    "apiVersion": EPP_CONFIG_API,
    "kind": "EndpointPickerConfig",
    "plugins": [
        {"type": "prefill-header-handler"},
        {"type": "prefill-filter"},
        {"type": "decode-filter"},
        {"type": "queue-scorer"},
        {"type": "prefix-cache-scorer"},
        {"type": "max-score-picker"},
        {"type": "pd-profile-handler", "parameters": {"threshold": 0}},
    ],
    "schedulingProfiles": [
        {"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}, *_PROFILE_PLUGINS]},
        {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}, *_PROFILE_PLUGINS]},
    ],
}


class _PlainDumper(yaml.SafeDumper):
    """Writes shared sub-objects out in full: the picker reads the config, not YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def phase_labels(phase: str) -> dict[str, str]:
    """Labels llm-d's prefill/decode filters select serving pods by."""
    return {LLMD_ROLE: PHASE_ROLES[phase]}


def serving_selector(replica: Replica) -> dict[str, str]:
    return {**replica.selector(), labels.SERVING: "true"}


def check_ports(spec: ModelReplicaSpec) -> None:
    """The http ports the serving surface relies on; InvalidInput names the offending engine."""
    prefill_decode = spec.serving.mode == "PrefillDecode"
    serving_ports = {}
    for i, engine in enumerate(spec.engines):
        member = engine.serving_member
        at = f"spec.engines[{i}].members[{engine.members.index(member)}].template.spec.containers"
        port = member.template.engine.http_port()
        serving_ports[engine.name] = port
        if prefill_decode and engine.phase == "Decode" and port == SERVING_PORT:
            raise xp.InvalidInput(
                at,
                f"the Decode engine's routing sidecar listens on {SERVING_PORT}: "
                "give the engine container a port named http on another port",
            )
        if prefill_decode and engine.phase == "Prefill" and port != SERVING_PORT:
            raise xp.InvalidInput(
                at, f"the Prefill engine must serve http on {SERVING_PORT}, the pool's port"
            )
    if not prefill_decode and len(set(serving_ports.values())) > 1:
        raise xp.InvalidInput(
            "spec.engines",
            f"under Unified serving every engine serves on one http port, got {serving_ports}",
        )


def routing_sidecar(replica: Replica, engine_port: int) -> dict[str, Any]:
    """llm-d's routing sidecar for a decode pod, as a native sidecar (restartPolicy Always)."""
    return {
        "name": "routing-sidecar",
        "image": ROUTING_SIDECAR_IMAGE,
        "restartPolicy": "Always",
        "args": [
            f"--port={SERVING_PORT}",
            f"--vllm-port={engine_port}",
            f"--connector={ROUTING_SIDECAR_CONNECTOR}",
            "--secure-proxy=false",
        ],
        "ports": [{"name": "sidecar", "containerPort": SERVING_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": SERVING_PORT}, "periodSeconds": 5},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }


def path_prefix(replica: Replica) -> str:
    return f"/{replica.namespace}/{replica.name}/"


def endpoint(replica: Replica, gateway_address: str | None) -> str:
    """The replica's base URL on its cluster Gateway; empty until the Gateway has an address."""
    if not gateway_address:
        return ""
    host = f"[{gateway_address}]" if ":" in gateway_address else gateway_address
    return f"http://{host}{path_prefix(replica).rstrip('/')}"


def http_route(replica: Replica, backend: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": replica.metadata(replica.resource_name()),
        "spec": {
            "parentRefs": [dict(GATEWAY_PARENT)],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": path_prefix(replica)}}],
                    "filters": [
                        {
                            "type": "URLRewrite",
                            "urlRewrite": {
                                "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}
                            },
                        }
                    ],
                    "backendRefs": [backend],
                }
            ],
        },
    }


# --- what differs by serving mode -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mode:
    """A serving mode's part of the surface."""

    target_port: Callable[[Replica], int]  # the serving pods' port the InferencePool targets
    epp_config: dict[str, Any]  # the endpoint picker's default EndpointPickerConfig


def unified_port(replica: Replica) -> int:
    """Every engine of a Unified replica serves on one http port (check_ports)."""
    return replica.spec.engines[0].serving_member.template.engine.http_port()


MODES = {
    "Unified": Mode(target_port=unified_port, epp_config=UNIFIED_EPP_CONFIG),
    # the decode pod's routing sidecar and the prefill engine listen on 8000
    "PrefillDecode": Mode(target_port=lambda _: SERVING_PORT, epp_config=PREFILL_DECODE_EPP_CONFIG),
}


def mode(replica: Replica) -> Mode:
    return MODES[replica.spec.serving.mode]


# --- the InferencePool and its endpoint picker ------------------------------------------------


def epp_name(replica: Replica) -> str:
    return replica.resource_name("epp")


def epp_config(replica: Replica) -> dict[str, Any]:
    """The mode's default config; top-level keys of serving.endpointPicker.config replace it."""
    picker = replica.spec.serving.endpoint_picker
    default = copy.deepcopy(mode(replica).epp_config)
    return {**default, **_sorted((picker.config if picker else None) or {})}


def _sorted(value: Any) -> Any:
    """The user's part in key order: it arrives in a protobuf Struct, whose map order is not
    stable across processes, and a flag text that changed would roll the picker out again."""
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def epp_config_text(replica: Replica) -> str:
    """The config as the picker's ``--config-text`` flag carries it: YAML, written out in full."""
    return yaml.dump(epp_config(replica), Dumper=_PlainDumper, sort_keys=False)


def inference_pool(replica: Replica) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": replica.metadata(replica.resource_name()),
        "spec": {
            "selector": {"matchLabels": serving_selector(replica)},
            "targetPorts": [{"number": mode(replica).target_port(replica)}],
            "endpointPickerRef": {
                "name": epp_name(replica),
                "port": {"number": EPP_GRPC_PORT},
                "failureMode": "FailClose",
            },
        },
    }


def epp_service(replica: Replica) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": replica.metadata(epp_name(replica), **{COMPONENT: "endpoint-picker"}),
        "spec": {
            "type": "ClusterIP",
            "selector": {**replica.selector(), COMPONENT: "endpoint-picker"},
            "ports": [
                {
                    "name": "grpc-ext-proc",
                    "port": EPP_GRPC_PORT,
                    "targetPort": EPP_GRPC_PORT,
                    "protocol": "TCP",
                    "appProtocol": "http2",
                },
                {"name": "metrics", "port": EPP_METRICS_PORT, "targetPort": EPP_METRICS_PORT},
            ],
        },
    }


def epp_container(replica: Replica) -> dict[str, Any]:
    """The picker container: llm-d's image, or the user's template with plnt's flags first."""
    flags = [
        f"--pool-name={replica.resource_name()}",
        f"--pool-namespace={replica.namespace}",
        f"--config-text={epp_config_text(replica)}",
        f"--grpc-port={EPP_GRPC_PORT}",
        f"--grpc-health-port={EPP_HEALTH_PORT}",
        f"--metrics-port={EPP_METRICS_PORT}",
    ]
    health = {"grpc": {"port": EPP_HEALTH_PORT, "service": "inference-extension"}}
    container: dict[str, Any] = {"name": "epp", "image": EPP_IMAGE}
    picker = replica.spec.serving.endpoint_picker
    if picker:
        container = picker.template.spec.containers[0].dump()
    container["args"] = flags + (container.get("args") or [])
    container["ports"] = [
        {"name": "grpc", "containerPort": EPP_GRPC_PORT},
        {"name": "grpc-health", "containerPort": EPP_HEALTH_PORT},
        {"name": "metrics", "containerPort": EPP_METRICS_PORT},
    ]
    container["readinessProbe"] = {**health, "periodSeconds": 5}
    container["livenessProbe"] = {**health, "initialDelaySeconds": 5, "periodSeconds": 10}
    return container


def epp_deployment(replica: Replica) -> dict[str, Any]:
    name = epp_name(replica)
    pod_labels = {**replica.common_labels(), COMPONENT: "endpoint-picker"}
    spec: dict[str, Any] = {
        # shared by every picker of the namespace, composed by the InferenceCluster
        "serviceAccountName": workload_cluster.ENDPOINT_PICKER,
        "containers": [epp_container(replica)],
        # it needs no device: on a CPU or System pool, never taking room on a GPU node
        **workload_cluster.cpu_pool_placement(),
    }
    picker = replica.spec.serving.endpoint_picker
    if picker and picker.template.spec.image_pull_secrets:
        spec["imagePullSecrets"] = [s.dump() for s in picker.template.spec.image_pull_secrets]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": replica.metadata(name, **{COMPONENT: "endpoint-picker"}),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {**replica.selector(), COMPONENT: "endpoint-picker"}},
            "template": {"metadata": {"labels": pod_labels}, "spec": spec},
        },
    }


def endpoint_picker(replica: Replica) -> dict[str, dict[str, Any]]:
    """The EndpointPicker router: llm-d's inference scheduler and what it runs with."""
    return {
        "epp-service": epp_service(replica),
        "epp-deployment": epp_deployment(replica),
    }


# serving.router -> the manifests of the router in front of the pool (unset: EndpointPicker).
ROUTERS: dict[str, Callable[[Replica], dict[str, dict[str, Any]]]] = {
    "EndpointPicker": endpoint_picker,
}
DEFAULT_ROUTER = "EndpointPicker"


def surface(replica: Replica) -> dict[str, dict[str, Any]]:
    """Every manifest (by composition resource name) that exposes the replica, in both modes."""
    pool = inference_pool(replica)
    backend = {
        "group": "inference.networking.k8s.io",
        "kind": "InferencePool",
        "name": pool["metadata"]["name"],
    }
    router = ROUTERS[replica.spec.serving.router or DEFAULT_ROUTER]
    return {"inferencepool": pool, **router(replica), "httproute": http_route(replica, backend)}
