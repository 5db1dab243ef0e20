"""Stand-ins for the controllers that cannot run on this machine, and nothing else.

provider-coreweave and provider-helm cannot be had here (no CoreWeave API, no chart registry),
no gateway controller or data plane runs, and CKS's NodePool controller is CoreWeave's own.
What a workload cluster runs itself is real (tests/e2e/workload.py): kube-scheduler allocates
the DRA claims, kwok runs the Nodes and the pods' lifecycle, kube-controller-manager the rest;
only the GPU driver's ResourceSlices are written for it there. Each stand-in here writes only
what its real counterpart writes, read off their CRDs' status schemas:

- provider-coreweave: a VPC's and a CKS Cluster's `status.atProvider` and Ready/Synced. A CKS
  Cluster's `apiServerEndpoint` is a workload API server started for it, which authenticates
  the CoreWeave token as CKS does.
- provider-helm: a Release's `status.atProvider` (`state: deployed`, revision) and Ready/Synced,
  plus the cluster-scoped objects the chart would install on the target cluster when other
  components depend on them (Gateway API CRDs, the kgateway GatewayClass, the NVIDIA driver's
  DeviceClass); the lws chart's LeaderWorkerSet controller v0.7.0 itself runs, with its CRD and
  webhooks (tests/e2e/lws.py). The target is found as provider-helm finds it: the
  Release's ClusterProviderConfig, its kubeconfig Secret, the server in that kubeconfig.
- the gateway controller: a Gateway's `status.addresses` (a TEST-NET-1 address inside the
  private network namespace) and Accepted/Programmed conditions; its data plane is
  `tests/e2e/engines.py`.
- CKS's NodePool controller: a NodePool's AtTarget condition and node counts, and the pool's
  Nodes (with the NodePool's labels and taints, run by kwok) as CKS would join them, each with
  the GPUs of the InferenceClass whose instance type the pool runs.

What stays simulated and why: CoreWeave's API and CKS (no account here), Helm charts (no chart
registry; what they install is created as above), the gateway's controller and data plane (no
proxy: tests/e2e/engines.py), and the GPU driver's kubelet plugin (no kubelet or GPU: its
ResourceSlices are written, tests/e2e/workload.py).
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import yaml

from plnt import labels
from tests.e2e import kube, lws, netns, workload

if TYPE_CHECKING:
    from tests.e2e.stack import ControlPlane

log = logging.getLogger("plnt.e2e.simulator")

VPC = ("networking.coreweave.m.crossplane.io/v1alpha1", "VPC")
CKS_CLUSTER = ("cks.coreweave.m.crossplane.io/v1alpha1", "Cluster")
RELEASE = ("helm.m.crossplane.io/v1beta1", "Release")
HELM_CONFIG = ("helm.m.crossplane.io/v1beta1", "ClusterProviderConfig")
GATEWAY = ("gateway.networking.k8s.io/v1", "Gateway")
HTTPROUTE = ("gateway.networking.k8s.io/v1", "HTTPRoute")
GATEWAY_CONTROLLER = "plnt.test/gateway-stand-in"
NODEPOOL = ("compute.coreweave.com/v1alpha1", "NodePool")
INFERENCE_CLASS = ("modelplane.ai/v1alpha1", "InferenceClass")

# What a chart puts on the cluster that another component needs to exist (CRDs, classes).
CHART_OBJECTS: dict[str, tuple[str, ...]] = {
    "gateway-crds-helm": (
        "gateway.networking.k8s.io_gatewayclasses.yaml",
        "gateway.networking.k8s.io_gateways.yaml",
        "gateway.networking.k8s.io_httproutes.yaml",
        "gateway.networking.k8s.io_referencegrants.yaml",
    ),
}
GATEWAY_CLASS = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "GatewayClass",
    "metadata": {"name": "kgateway"},
    "spec": {"controllerName": "kgateway.dev/kgateway"},
}
NVIDIA_DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
}


def schemaless_crd(group: str, version: str, kind: str, scope: str) -> dict[str, Any]:
    """A CRD accepting any body, with the status subresource: a stand-in for CRDs whose
    schema is not to be had here (provider-kubernetes needs only the kind to exist)."""
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


# CKS's NodePool CRD is CoreWeave's own; kgateway-crds installs GatewayParameters (among
# others). Neither schema is in third_party/crds.
NODEPOOL_CRD = schemaless_crd("compute.coreweave.com", "v1alpha1", "NodePool", "Cluster")
CHART_CRDS = {
    "kgateway-crds": [
        schemaless_crd("gateway.kgateway.dev", "v1alpha1", "GatewayParameters", "Namespaced")
    ],
}
# CKS ships a shared-vast StorageClass on every cluster; a CoreWeaveCluster copies it.
SHARED_VAST = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {"name": "shared-vast"},
    "provisioner": "csi.vastdata.com",
    "parameters": {"vip_pool_name": "shared"},
    "reclaimPolicy": "Retain",
    "volumeBindingMode": "Immediate",
}


def condition(
    typ: str, status: str, reason: str, message: str = "", generation: int | None = None
) -> dict[str, Any]:
    """A metav1.Condition (Gateway API requires the message, possibly empty)."""
    out: dict[str, Any] = {
        "type": typ,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def _has(obj: Mapping[str, Any], typ: str, status: str = "True") -> bool:
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == typ and c.get("status") == status for c in conds)


class Simulator:
    """Runs the stand-ins every half second on a thread of its own (inside the namespace)."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="plnt-e2e-simulator", daemon=True)
        self.errors: list[str] = []
        self.gateway_addresses: dict[tuple[str, str], str] = {}  # (api server, ns/name) -> IP
        self.installed: set[tuple[str, str]] = set()  # (api server, chart)
        self._settled_releases: set[str] = set()  # uids of Releases installed and reported Ready
        self.cks_clusters: dict[tuple[str, str], str] = {}  # (ns, name) -> workload name
        self._on_lo: set[str] = set()  # cluster IPs the service proxy stand-in put on lo
        # workload clusters whose API server a test has stopped: their stand-ins wait (a call
        # would hang the loop for every cluster), their data plane serves from what it last
        # read, as a gateway keeps its configuration while its API server is away
        self.paused: set[str] = set()
        self.passes = 0  # passes of every stand-in ended (wait_passes)
        self._passed = threading.Condition()
        from tests.e2e import engines

        self.engines = engines.Engines(self)
        self.engines.start()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.engines.stop()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            for stand_in in self.stand_ins():
                try:
                    stand_in()
                except Exception:  # a stand-in must not die on a transient API error
                    self._log(traceback.format_exc())
            with self._passed:
                self.passes += 1
                self._passed.notify_all()
            self.stopping.wait(0.5)

    def wait_passes(self, count: int, seconds: float = 90) -> None:
        """Until ``count`` more passes have ended: the second ended pass began after the call."""
        with self._passed:
            target = self.passes + count
            if not self._passed.wait_for(lambda: self.passes >= target, seconds):
                raise TimeoutError(f"the simulator ended no {count} passes in {seconds:.0f}s")

    def _log(self, error: str) -> None:
        self.errors.append(error)
        del self.errors[:-20]
        with (self.plane.dir / "logs" / "simulator.log").open("a") as log_file:
            log_file.write(time.strftime("%H:%M:%S ") + error + "\n")

    def stand_ins(self) -> list[Any]:
        """One pass of every stand-in, each on its own so one failure stops no other."""
        mgmt = self.plane.mgmt
        out: list[Any] = [
            lambda: [self._coreweave_vpc(v) for v in mgmt.list(*VPC)],
            lambda: [self._cks_cluster(c) for c in mgmt.list(*CKS_CLUSTER)],
            lambda: [self._helm_release(r) for r in mgmt.list(*RELEASE)],
            lambda: [self._gateway(mgmt, g) for g in mgmt.list(*GATEWAY)],
            lambda: self._control_plane_routes(mgmt),
        ]
        for name, api in list(self.plane.workloads.items()):
            if name in self.paused:
                continue
            out += [
                lambda api=api: [self._node_pool(api, p) for p in api.list(*NODEPOOL)],
                lambda api=api: [self._gateway(api, g) for g in api.list(*GATEWAY)],
                lambda api=api: self._http_routes(api),
            ]
        return out

    # --- provider-coreweave -----------------------------------------------------------------

    def _coreweave_vpc(self, vpc: dict[str, Any]) -> None:
        if _has(vpc, "Ready"):
            return
        spec = (vpc.get("spec") or {}).get("forProvider") or {}
        uid = vpc["metadata"]["uid"]
        self.plane.mgmt.patch_status(
            vpc,
            {
                "atProvider": {"id": uid, "name": spec.get("name"), "zone": spec.get("zone")},
                "conditions": [
                    condition("Ready", "True", "Available"),
                    condition("Synced", "True", "ReconcileSuccess"),
                ],
            },
        )

    def _cks_cluster(self, cluster: dict[str, Any]) -> None:
        meta = cluster["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        workload = self.plane.workload(f"cks-{key[1]}")
        self.cks_clusters[key] = f"cks-{key[1]}"
        self._cks_basics(workload)
        endpoint = f"127.0.0.1:{workload.port}"
        at = ((cluster.get("status") or {}).get("atProvider")) or {}
        if _has(cluster, "Ready") and at.get("apiServerEndpoint") == endpoint:
            return
        spec = (cluster.get("spec") or {}).get("forProvider") or {}
        self.plane.mgmt.patch_status(
            cluster,
            {
                "atProvider": {
                    "id": meta["uid"],
                    "name": spec.get("name"),
                    "zone": spec.get("zone"),
                    "version": spec.get("version"),
                    "status": "STATUS_RUNNING",
                    "apiServerEndpoint": endpoint,
                },
                "conditions": [
                    condition("Ready", "True", "Available"),
                    condition("Synced", "True", "ReconcileSuccess"),
                ],
            },
        )

    def _cks_basics(self, api: kube.APIServer) -> None:
        """What every CKS cluster has before anyone installs anything."""
        if (api.name, "cks") in self.installed:
            return
        api.create_crds([NODEPOOL_CRD])
        api.apply(SHARED_VAST)
        self.installed.add((api.name, "cks"))

    # --- provider-helm ----------------------------------------------------------------------

    def _helm_release(self, release: dict[str, Any]) -> None:
        uid = release["metadata"].get("uid", "")
        if uid in self._settled_releases and _has(release, "Ready"):
            return  # installed and reported: no GETs of its ProviderConfig and Secret each pass
        target = self._helm_target(release)
        if target is None:
            if not _has(release, "Ready", "False"):
                self.plane.mgmt.patch_status(
                    release,
                    {
                        "conditions": [
                            condition("Ready", "False", "Unavailable"),
                            condition(
                                "Synced",
                                "False",
                                "ReconcileError",
                                "cannot connect to the cluster: kubeconfig not found",
                            ),
                        ]
                    },
                )
            return
        chart = ((release.get("spec") or {}).get("forProvider") or {}).get("chart") or {}
        name = chart.get("name", "")
        if (target.name, name) not in self.installed:
            docs = [d for f in CHART_OBJECTS.get(name, ()) for d in _shared_crd(f)]
            docs += CHART_CRDS.get(name, [])
            if docs:
                target.create_crds(docs)
            if name == "kgateway":
                target.apply(GATEWAY_CLASS)
            if name == "nvidia-dra-driver-gpu":
                target.apply(NVIDIA_DEVICE_CLASS)
            if name == "lws":
                # what the chart runs, for real: the controller, its CRD and webhooks
                lws.start(target.name, self.plane.procs, target, self.plane.ca, target.dir / "lws")
            self.installed.add((target.name, name))
        if _has(release, "Ready"):
            self._settled_releases.add(uid)
            return
        self.plane.mgmt.patch_status(
            release,
            {
                "atProvider": {
                    "state": "deployed",
                    "revision": 1,
                    "releaseDescription": "Install complete",
                    "version": chart.get("version"),
                },
                "conditions": [
                    condition("Ready", "True", "Available"),
                    condition("Synced", "True", "ReconcileSuccess"),
                ],
            },
        )

    def _helm_target(self, release: dict[str, Any]) -> kube.APIServer | None:
        ref = (release.get("spec") or {}).get("providerConfigRef") or {}
        config = self.plane.mgmt.get(*HELM_CONFIG, ref.get("name", ""))
        secret_ref = (((config or {}).get("spec") or {}).get("credentials") or {}).get(
            "secretRef"
        ) or {}
        if not secret_ref:
            return None
        secret = self.plane.mgmt.get("v1", "Secret", secret_ref["name"], secret_ref["namespace"])
        data = ((secret or {}).get("data") or {}).get(secret_ref.get("key", "kubeconfig"))
        if not data:
            return None
        try:
            doc = yaml.safe_load(base64.b64decode(data))
            server = doc["clusters"][0]["cluster"]["server"]
        except (ValueError, KeyError, IndexError, TypeError, yaml.YAMLError):
            return None
        if not server.startswith("https://"):
            server = "https://" + server
        return self.plane.workload_for_url(server)

    # --- gateway controller -----------------------------------------------------------------

    def _gateway(self, api: kube.APIServer, gateway: dict[str, Any]) -> None:
        meta = gateway["metadata"]
        key = (api.name, f"{meta.get('namespace')}/{meta['name']}")
        if key not in self.gateway_addresses:
            self.gateway_addresses[key] = f"{netns.GATEWAY_NET}.{len(self.gateway_addresses) + 1}"
            self.engines.listen(self.gateway_addresses[key], api)
        address = self.gateway_addresses[key]
        addresses = (gateway.get("status") or {}).get("addresses") or []
        if _has(gateway, "Programmed") and addresses and addresses[0].get("value") == address:
            return
        api.patch_status(
            gateway,
            {
                "addresses": [{"type": "IPAddress", "value": address}],
                "conditions": [
                    condition("Accepted", "True", "Accepted", "", meta.get("generation")),
                    condition("Programmed", "True", "Programmed", "", meta.get("generation")),
                ],
            },
        )

    def _http_routes(self, api: kube.APIServer) -> None:
        routes = api.list(*HTTPROUTE)
        self.engines.routes[api.name] = routes  # what the data plane routes by
        self.engines.ready[api.name] = {  # and to which replicas: those with a Ready engine
            (pod["metadata"]["namespace"], pod["metadata"]["labels"][labels.REPLICA])
            for pod in api.list("v1", "Pod", labels={labels.SERVING: "true"})
            if labels.REPLICA in pod["metadata"]["labels"]
            and _has(pod, "Ready")
            and not pod["metadata"].get("deletionTimestamp")
        }
        self._accept(api, routes)

    def _control_plane_routes(self, api: kube.APIServer) -> None:
        """The control-plane Gateway's routes, accepted, and what the data plane routes them by:
        the routes and their backends' addresses (ModelService composes an EndpointSlice per IP
        endpoint)."""
        routes = api.list(*HTTPROUTE)
        self.engines.routes[api.name] = routes
        self.engines.backends[api.name] = self.engines.addresses_of(
            api.list("discovery.k8s.io/v1", "EndpointSlice")
        )
        self._accept(api, routes)
        self._service_proxy(api)

    def _service_proxy(self, api: kube.APIServer) -> None:
        """kube-proxy's part on the management cluster: each Service with a cluster IP and a
        ready endpoint in its EndpointSlices answers on that IP and its first port (the IP put
        on `lo`, in the private network namespace), forwarding to the endpoint."""
        backends = self.engines.backends.get(api.name, {})
        for svc in api.list("v1", "Service"):
            meta, spec = svc["metadata"], svc.get("spec") or {}
            key = (meta.get("namespace", ""), meta["name"])
            ip, ports = spec.get("clusterIP"), spec.get("ports") or []
            if key == ("default", "kubernetes") or key not in backends or not ports:
                continue
            if not ip or ip == "None":
                continue
            port = ports[0]["port"]
            if self.engines.services.get((ip, port)) == backends[key]:
                continue
            if ip not in self._on_lo:
                netns.add_address(ip)
                self._on_lo.add(ip)
            self.engines.service_proxy(ip, port, backends[key])

    def _accept(self, api: kube.APIServer, routes: list[dict[str, Any]]) -> None:
        """Accepts every route, with the Gateways listed once per pass: a GET per route twice
        a second was most of the requests a workload API server served at rest, and the cost
        benchmark counted them against the replicas."""
        if not routes:
            return
        gateways = {
            (g["metadata"].get("namespace", ""), g["metadata"]["name"]) for g in api.list(*GATEWAY)
        }
        for route in routes:
            self._http_route(api, route, gateways)

    def _http_route(
        self, api: kube.APIServer, route: dict[str, Any], gateways: set[tuple[str, str]]
    ) -> None:
        """Accepts a route on each Gateway it names that exists (as a controller that accepts
        every route its listeners allow), with its references resolved."""
        meta = route["metadata"]
        parents = []
        for ref in (route.get("spec") or {}).get("parentRefs") or []:
            namespace = ref.get("namespace") or meta.get("namespace")
            if (namespace, ref["name"]) not in gateways:
                continue
            parents.append(
                {
                    "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", **ref},
                    "controllerName": GATEWAY_CONTROLLER,
                    "conditions": [
                        condition("Accepted", "True", "Accepted", "", meta.get("generation")),
                        condition(
                            "ResolvedRefs", "True", "ResolvedRefs", "", meta.get("generation")
                        ),
                    ],
                }
            )
        seen = [
            (p.get("parentRef", {}).get("name"), _gen(p))
            for p in (route.get("status") or {}).get("parents") or []
        ]
        if seen == [(p["parentRef"]["name"], meta.get("generation")) for p in parents]:
            return
        api.patch_status(route, {"parents": parents})

    # --- CKS and the kubelet ----------------------------------------------------------------

    def _node_pool(self, api: kube.APIServer, pool: dict[str, Any]) -> None:
        if _has(pool, "AtTarget"):
            return
        spec = pool.get("spec") or {}
        nodes = spec.get("targetNodes", spec.get("minNodes", 1))
        self.add_nodes(
            api,
            pool["metadata"]["name"],
            nodes,
            labels=spec.get("nodeLabels") or {},
            taints=spec.get("nodeTaints") or [],
            devices=self._class_devices(spec.get("instanceType")),
        )
        api.patch_status(
            pool,
            {
                "currentNodes": nodes,
                "conditions": [condition("AtTarget", "True", "TargetMet")],
            },
        )

    def add_nodes(
        self,
        api: kube.APIServer,
        pool: str,
        count: int,
        *,
        labels: Mapping[str, str],
        taints: list[dict[str, Any]],
        devices: list[dict[str, Any]],
    ) -> None:
        """``count`` nodes of ``pool`` (labels and taints as given) as a cluster's operator or
        CKS would have joined them, run by kwok, each publishing ``devices`` (InferenceClass
        device entries) as the GPU driver would."""
        for i in range(count):
            workload.add_node(api, f"{pool}-{i}", labels=labels, taints=taints, devices=devices)

    def _class_devices(self, instance_type: str | None) -> list[dict[str, Any]]:
        """The devices of the InferenceClass provisioned as ``instance_type``: what the GPU
        driver reports for that machine."""
        for cls in self.plane.mgmt.list(*INFERENCE_CLASS):
            spec = cls.get("spec") or {}
            coreweave = (spec.get("provisioning") or {}).get("coreweave") or {}
            if instance_type and coreweave.get("instanceType") == instance_type:
                return list(spec.get("devices") or [])
        return []


def _gen(parent: Mapping[str, Any]) -> int | None:
    conds = parent.get("conditions") or []
    return conds[0].get("observedGeneration") if conds else None


def _shared_crd(name: str) -> list[dict[str, Any]]:
    from tests.e2e.stack import SHARED_CRDS

    return kube.load_yaml(SHARED_CRDS / name)
