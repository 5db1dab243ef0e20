"""What runs inside a workload cluster besides its API server, the real components first.

- kube-controller-manager (v1.37.2): the Deployment, ReplicaSet, StatefulSet and ResourceClaim
  controllers make the engines' pods and their claims from plnt's ResourceClaimTemplates; the
  node lifecycle controller lifts a new Node's not-ready taint once its heartbeats say Ready
  (and taints it again when they stop); the pod garbage collector deletes the pods of a Node
  that is gone (what lets a workload's pods come back elsewhere, or stay unschedulable); the
  ServiceAccount, garbage-collector and namespace controllers as in any cluster.
- kube-scheduler (v1.37.2, DRA on as it is by default): binds every pod and allocates every
  ResourceClaim from the ResourceSlices on the nodes, with the DRA CEL library evaluating plnt's
  device selectors. Its PodScheduled=False messages are the real ones.
- kwok (v0.8.0, the Kubernetes SIG's node and pod simulator): the Nodes' heartbeats and
  Ready, and every bound pod's lifecycle through the Stages below: the `stage-weights` init
  container running for STAGING_SECONDS, then the engine starting for ENGINE_START_SECONDS,
  then Ready; a deleted pod goes as the kubelet would let it.
- the NVIDIA DRA driver's kubelet plugin cannot run (no kubelet, no GPU): `resource_slice`
  writes only what it would publish, one ResourceSlice per node (driver gpu.nvidia.com, one pool
  per node named after it, the devices with the attributes and capacity the InferenceClass
  declares for that GPU model, which are the driver's own names). The dra-example-driver
  (sigs.k8s.io/dra-example-driver v0.2.0, served by the module proxy) was not tried: its kubelet
  plugin serves the kubelet's plugin-registration and DRA gRPC sockets and is run as a
  DaemonSet pod on each node, and no kubelet runs here to start it or call it.
"""

from __future__ import annotations

import hashlib
import pathlib
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from tests.e2e.kube import APIServer, Processes
from tests.reconcile.apiserver import TOOLS

KUBE_CONTROLLER_MANAGER = TOOLS / "kube-controller-manager"
KUBE_SCHEDULER = TOOLS / "kube-scheduler"
KWOK = TOOLS / "kwok"

# How long a pod's init containers (staging model weights) run, and then how long its engine
# takes to load them and pass its readiness probe. A ModelReplica reports PullingWeights from
# its first reconcile after its Deployment has pods (a watched change) until it reads the pods'
# finished init containers back (each pod's observe-only Object, refreshed on provider-
# kubernetes' poll), then Starting until a copy is available: the WorkflowRun's PullingWeights
# and Deploying; its phase walk writes every step in order however soon the engine is up
# (functions/workflow_run/phases.py). kwok's watches stream without restarts on etcd 3.6, so a
# pod is Ready about the sum of these delays after its creation (tests/e2e/replica_start.py
# measures it beside them).
STAGING_SECONDS = 20.0
ENGINE_START_SECONDS = 4.0
# kwok's heartbeat, well inside the node lifecycle controller's grace period (50 s)
HEARTBEAT_SECONDS = 10.0
# What kwok manages: the Nodes this module makes carry it; nothing else on the cluster is kwok's.
KWOK_NODE = {"kwok.x-k8s.io/node": "fake"}
DRIVER = "gpu.nvidia.com"

CONTROLLERS = ",".join(
    f"{c}-controller"
    for c in (
        "garbage-collector",
        "namespace",
        "deployment",
        "replicaset",
        "statefulset",
        "resourceclaim",
        "serviceaccount",
        "node-lifecycle",
        "pod-garbage-collector",
    )
)


def start(name: str, procs: Processes, kubeconfig: pathlib.Path) -> None:
    """The workload cluster's kube-controller-manager, kube-scheduler and kwok."""
    procs.start(
        f"{name}-controller-manager",
        [
            str(KUBE_CONTROLLER_MANAGER),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--controllers={CONTROLLERS}",
            "--leader-elect=false",
            "--secure-port=0",
            "--use-service-account-credentials=false",
            "--concurrent-gc-syncs=10",
        ],
    )
    procs.start(
        f"{name}-scheduler",
        [
            str(KUBE_SCHEDULER),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
        ],
    )
    start_kwok(name, procs, kubeconfig)


def start_kwok(name: str, procs: Processes, kubeconfig: pathlib.Path) -> subprocess.Popen:
    config = kubeconfig.parent / "kwok.yaml"
    config.write_text(yaml.safe_dump_all(stages()))
    selector = ",".join(f"{k}={v}" for k, v in KWOK_NODE.items())
    return procs.start(
        f"{name}-kwok",
        [
            str(KWOK),
            f"--kubeconfig={kubeconfig}",
            f"--config={config}",
            f"--manage-nodes-with-annotation-selector={selector}",
            "--manage-all-nodes=false",
            "--node-lease-duration-seconds=0",
            "--cidr=10.1.0.0/16",
            "--node-ip=10.0.0.1",
        ],
    )


# --- kwok's Stages ----------------------------------------------------------------------------


def _stage(
    name: str,
    kind: str,
    match: Sequence[tuple[str, str, Sequence[str]]],
    next_: dict[str, Any],
    delay_s: float = 0.0,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {
            "matchExpressions": [
                {"key": key, "operator": op, **({"values": list(values)} if values else {})}
                for key, op, values in match
            ]
        },
        "next": next_,
    }
    if delay_s:
        spec["delay"] = {"durationMilliseconds": int(delay_s * 1000)}
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": spec,
    }


_NODE_CONDITIONS = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ or $.metadata.creationTimestamp $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""

_NODE_STATUS = (
    _NODE_CONDITIONS
    + """\
addresses:
- address: {{ NodeIP | Quote }}
  type: InternalIP
- address: {{ NodeName | Quote }}
  type: Hostname
allocatable:
{{ with .status.allocatable }}{{ YAML . 1 }}{{ else }}  cpu: "128"
  memory: 1Ti
  pods: "110"{{ end }}
capacity:
{{ with .status.capacity }}{{ YAML . 1 }}{{ else }}  cpu: "128"
  memory: 1Ti
  pods: "110"{{ end }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: fake
phase: Running
"""
)


def _pod_conditions(initialized: str, reason: str, ready: bool) -> str:
    """A pod's conditions (a Go template): scheduled, Initialized with ``initialized`` and
    ``reason`` (template text), and its containers ready or not."""
    since = "  lastTransitionTime: {{ $now | Quote }}\n"
    ready_fields = '"True"\n  reason: ""' if ready else '"False"\n  reason: ContainersNotReady'
    out = "{{ $now := Now }}\nconditions:\n"
    out += '- type: PodScheduled\n  status: "True"\n' + since
    out += f"- type: Initialized\n  status: {initialized}\n  reason: {reason}\n" + since
    for typ in ("ContainersReady", "Ready"):
        out += f"- type: {typ}\n  status: {ready_fields}\n" + since
    return out


def _container_statuses(field: str, containers: str, ready: bool, started: str, state: str) -> str:
    """``field`` (initContainerStatuses or containerStatuses) for every container of
    ``.spec.<containers>``: ready or not, ``started`` and ``state`` as template text."""
    return (
        f"{field}:\n{{{{ range .spec.{containers} }}}}\n"
        "- image: {{ .image | Quote }}\n  name: {{ .name | Quote }}\n"
        f"  ready: {str(ready).lower()}\n  restartCount: 0\n  started: {started}\n"
        f"  state:\n{state}{{{{ end }}}}\n"
    )


_RUNNING = "    running:\n      startedAt: {{ $now | Quote }}\n"
_INITS = "{{ if .spec.initContainers }}"

_POD_CREATED = (
    _pod_conditions(
        _INITS + '"False"{{ else }}"True"{{ end }}',
        _INITS + 'PodInitializing{{ else }}""{{ end }}',
        ready=False,
    )
    + _INITS
    + "\n"
    + _container_statuses("initContainerStatuses", "initContainers", False, "true", _RUNNING)
    + "{{ end }}\n"
    + _container_statuses(
        "containerStatuses",
        "containers",
        False,
        "false",
        "    waiting:\n      reason: {{ if $.spec.initContainers }}PodInitializing"
        "{{ else }}ContainerCreating{{ end }}\n",
    )
    + """\
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace | Quote }}
phase: Pending
startTime: {{ $now | Quote }}
"""
)

_POD_INITIALIZED = (
    _pod_conditions('"True"', '""', ready=False)
    + _container_statuses(
        "initContainerStatuses",
        "initContainers",
        True,
        "false",
        "    terminated:\n      exitCode: 0\n      reason: Completed\n"
        "      finishedAt: {{ $now | Quote }}\n",
    )
    + _container_statuses("containerStatuses", "containers", False, "true", _RUNNING)
    + "phase: Running\n"
)

_POD_READY = (
    _pod_conditions('"True"', '""', ready=True)
    + _container_statuses("containerStatuses", "containers", True, "true", _RUNNING)
    + "phase: Running\n"
)

_LIVE = (".metadata.deletionTimestamp", "DoesNotExist", ())
_BOUND = (".spec.nodeName", "Exists", ())


def stages(staging_s: float | None = None, engine_s: float | None = None) -> list[dict[str, Any]]:
    """kwok's Stages for the Nodes it manages and the pods bound to them: created (init
    containers running, or the engine creating), initialized after ``staging_s`` (the engine
    running, not ready), ready ``engine_s`` later; deleted once nothing holds them."""
    staging_s = STAGING_SECONDS if staging_s is None else staging_s
    engine_s = ENGINE_START_SECONDS if engine_s is None else engine_s
    ready = '.status.conditions.[] | select( .type == "Ready" ) | .status'
    initialized = '.status.conditions.[] | select( .type == "Initialized" ) | .status'
    return [
        _stage(
            "node-initialize",
            "Node",
            [(ready, "NotIn", ["True"])],
            {"statusTemplate": _NODE_STATUS},
        ),
        _stage(
            "node-heartbeat",
            "Node",
            [(ready, "In", ["True"])],
            {"statusTemplate": _NODE_CONDITIONS},
            HEARTBEAT_SECONDS,
        ),
        _stage(
            "pod-create",
            "Pod",
            [_LIVE, _BOUND, (".status.podIP", "DoesNotExist", ())],
            {
                "statusTemplate": _POD_CREATED,
                "event": {"type": "Normal", "reason": "Started", "message": "Started containers"},
            },
        ),
        _stage(
            "pod-initialized",
            "Pod",
            [_LIVE, (".status.podIP", "Exists", ()), (initialized, "In", ["False"])],
            {"statusTemplate": _POD_INITIALIZED},
            staging_s,
        ),
        _stage(
            "pod-engine-starting",
            "Pod",
            [
                _LIVE,
                (".status.podIP", "Exists", ()),
                (initialized, "In", ["True"]),
                (".status.phase", "In", ["Pending"]),
            ],
            {"statusTemplate": _POD_INITIALIZED},
        ),
        _stage(
            "pod-ready",
            "Pod",
            [_LIVE, (".status.phase", "In", ["Running"]), (ready, "In", ["False"])],
            {"statusTemplate": _POD_READY},
            engine_s,
        ),
        _stage(
            "pod-delete",
            "Pod",
            [
                (".metadata.deletionTimestamp", "Exists", ()),
                (".metadata.finalizers", "DoesNotExist", ()),
            ],
            {"delete": True},
        ),
    ]


# --- Nodes and the DRA driver's ResourceSlices --------------------------------------------------


def add_node(
    api: APIServer,
    name: str,
    *,
    labels: Mapping[str, str],
    taints: Sequence[Mapping[str, Any]] = (),
    devices: Sequence[Mapping[str, Any]] = (),
) -> None:
    """A Node kwok runs (labels and taints as its pool's), and its GPUs published as the NVIDIA
    DRA driver would: ``devices`` are InferenceClass device entries (spec.devices)."""
    api.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **labels},
                "annotations": dict(KWOK_NODE),
            },
            "spec": {"taints": [dict(t) for t in taints]},
        }
    )
    published = resource_slice(name, devices)
    if published:
        api.apply(published)


def resource_slice(node: str, devices: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The ResourceSlice the DRA driver's kubelet plugin publishes for ``node``: one pool per
    node, one device per GPU (gpu-0, gpu-1, …) with the class's attributes and capacity. Only
    DRA-claimed devices of the driver are published; None if the node has none."""
    published: list[dict[str, Any]] = []
    for entry in devices:
        if entry.get("claim") != "DRA" or entry.get("driver", DRIVER) != DRIVER:
            continue
        attributes = {k: dict(v) for k, v in (entry.get("attributes") or {}).items()}
        capacity = {k: {"value": v["value"]} for k, v in (entry.get("capacity") or {}).items()}
        for _ in range(int(entry.get("count", 1))):
            index = len(published)
            uuid = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
            published.append(
                {
                    "name": f"gpu-{index}",
                    "attributes": {
                        **attributes,
                        "index": {"int": index},
                        "minor": {"int": index},
                        "uuid": {
                            "string": f"GPU-{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:28]}"
                        },
                    },
                    "capacity": capacity,
                }
            )
    if not published:
        return None
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": published,
        },
    }
