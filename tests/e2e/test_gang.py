"""A gang replica on a bare workload cluster, the real way: what plnt renders for
examples/model-replica-gang (one LeaderWorkerSet of size 2, a leader and one worker, eight H100s
each) applied to a workload cluster running kube-controller-manager, kube-scheduler and kwok
(tests/e2e/workload.py) and the LWS controller with its webhooks (tests/e2e/lws.py). No
Crossplane: the ModelReplica is rendered in-process by plnt's own renderer (`plnt render`,
which plays the binder too), and each composed Object's manifest is applied as
provider-kubernetes would apply it.

Two nodes of the h100 pool, labelled and tainted as an existing cluster's operators run them
(tests/e2e/fleet.py), each publishing the eight GPUs of examples/fleet's nvidia-h100-8x class as
the NVIDIA DRA driver would. Read back from the API server: LWS made the leader StatefulSet and
the group's worker StatefulSet; its Pod webhook labelled the pods and gave them the leader's
address; the scheduler bound each pod to its own node (a node has eight GPUs, each pod claims
eight) and allocated each pod's claim eight gpu.nvidia.com devices of that node; kwok made them
Ready; the LeaderWorkerSet reports every group ready and Available.

Not applied: the manifests whose kinds a bare cluster has no CRD for (the HTTPRoute and the
InferencePool: the serving stack's Gateway API and inference extension are not installed).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import pytest
import yaml

from functions.inference_cluster import tenants
from plnt_host import render
from tests.e2e import kube, live, lws, simulator, workload
from tests.e2e.kube import CA, APIServer, Processes

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "model-replica-gang"
H100_CLASS = REPO / "examples" / "fleet" / "classes-coreweave-h100.yaml"
CLUSTER = "gang"
NODES = 2
POOL_LABELS = {"modelplane.ai/pool": "h100"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
STS = ("apps/v1", "StatefulSet")
POD = ("v1", "Pod")
CLAIM = ("resource.k8s.io/v1", "ResourceClaim")
LWS = (lws.API, "LeaderWorkerSet")
# What a bare workload cluster has no kind for (its serving stack is not installed).
NOT_INSTALLED = {"HTTPRoute", "InferencePool"}


@dataclasses.dataclass
class Gang:
    api: APIServer
    procs: Processes
    lws: dict[str, Any]  # the LeaderWorkerSet as rendered
    templates: dict[str, dict[str, Any]]  # ResourceClaimTemplates by name, as rendered
    skipped: set[str]

    @property
    def name(self) -> str:
        return self.lws["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.lws["metadata"]["namespace"]

    def pods(self) -> list[dict[str, Any]]:
        return self.api.list(*POD, namespace=self.namespace, labels={lws.NAME_LABEL: self.name})


def _manifests() -> list[dict[str, Any]]:
    """The workload manifests plnt composes for the example's ModelReplica, after what its
    InferenceCluster composes once for the replica's namespace (the Namespace, the endpoint
    picker's ServiceAccount, RoleBinding and ClusterRole), as they come on a real cluster."""
    out = render.render(render.load_scenario(EXAMPLE))
    replica = [o["spec"]["forProvider"]["manifest"] for o in out.composed if o["kind"] == "Object"]
    namespace = out.xr["metadata"]["namespace"]
    return [tenants.cluster_role(), *tenants.manifests(namespace).values(), *replica]


def _h100_devices() -> list[dict[str, Any]]:
    (cls,) = (d for d in kube.load_yaml(H100_CLASS) if d["metadata"]["name"] == "nvidia-h100-8x")
    return cls["spec"]["devices"]


def _apply_strict(api: APIServer, obj: dict[str, Any]) -> None:
    """Server-side apply refusing unknown fields: plnt's manifests must fit the schemas of the
    versions running here (LWS v0.7.0's CRD among them)."""
    meta = obj["metadata"]
    r = api.http.patch(
        api.path(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")),
        params={"fieldManager": "plnt-e2e", "force": "true", "fieldValidation": "Strict"},
        headers={"Content-Type": "application/apply-patch+yaml"},
        content=json.dumps(obj),
    )
    assert r.status_code < 400, f"apply {obj['kind']} {meta['name']}: {r.text}"


def _missing() -> list[str]:
    tools = (workload.KUBE_SCHEDULER, workload.KWOK, lws.LWS_MANAGER)
    return kube.missing_binaries() + [str(t) for t in tools if not t.is_file()]


@pytest.fixture(scope="module")
def gang(e2e_dir):
    gaps = _missing()
    if gaps:
        pytest.fail("the gang test needs " + ", ".join(gaps) + ": run `make test`")
    workdir = e2e_dir("gang")
    (workdir / "logs").mkdir(exist_ok=True)
    procs = Processes(workdir / "logs")
    ca = CA.make()
    try:
        api = APIServer(
            CLUSTER, workdir / "cluster", procs, ca, {"plnt-e2e-gang": ("admin", "system:masters")}
        )
        workload.start(CLUSTER, procs, api.kubeconfig(workdir / "cluster" / "kubeconfig"))
        lws.start(CLUSTER, procs, api, ca, workdir / "lws")
        api.apply(simulator.NVIDIA_DEVICE_CLASS)
        for i in range(NODES):
            workload.add_node(
                api, f"h100-{i}", labels=POOL_LABELS, taints=[GPU_TAINT], devices=_h100_devices()
            )
        manifests = _manifests()
        skipped: set[str] = set()
        for obj in manifests:
            try:
                api.path(obj["apiVersion"], obj["kind"])
            except LookupError:
                skipped.add(obj["kind"])
                continue
            _apply_strict(api, obj)
        (lws_obj,) = (m for m in manifests if m["kind"] == "LeaderWorkerSet")
        templates = {
            m["metadata"]["name"]: m for m in manifests if m["kind"] == "ResourceClaimTemplate"
        }
        yield Gang(api, procs, lws_obj, templates, skipped)
    finally:
        (workdir / "logs" / "exited").write_text("\n".join(procs.exited()) + "\n")
        procs.stop_all()


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c["status"]
    return None


@pytest.fixture(scope="module")
def available(gang: Gang) -> dict[str, Any]:
    """The LeaderWorkerSet once it reports Available (its pods scheduled and made Ready)."""
    replicas = gang.lws["spec"]["replicas"]

    def done(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        return status.get("readyReplicas") == replicas and _condition(obj, "Available") == "True"

    try:
        return live.wait_object(gang.api, *LWS, gang.name, gang.namespace, until=done, seconds=180)
    except TimeoutError as err:
        pods = {
            p["metadata"]["name"]: [
                (c["type"], c["status"], c.get("message", "")) for c in p["status"]["conditions"]
            ]
            for p in gang.pods()
            if p.get("status", {}).get("conditions")
        }
        raise TimeoutError(
            f"{err}\npods: {yaml.safe_dump(pods)}\nexited: {gang.procs.exited()}\n"
            f"lws-manager log:\n{gang.procs.tail(f'{CLUSTER}-lws-manager')}"
        ) from None


def test_only_the_serving_stack_kinds_were_left_out(gang: Gang) -> None:
    assert gang.skipped == NOT_INSTALLED


def test_lws_made_the_leader_and_worker_statefulsets(gang: Gang, available) -> None:
    spec = gang.lws["spec"]
    replicas, size = spec["replicas"], spec["leaderWorkerTemplate"]["size"]
    assert (replicas, size) == (1, 2)  # the example: one copy, a leader and one worker
    sets = {
        s["metadata"]["name"]: s
        for s in gang.api.list(*STS, namespace=gang.namespace, labels={lws.NAME_LABEL: gang.name})
    }
    workers = {f"{gang.name}-{group}" for group in range(replicas)}
    assert set(sets) == {gang.name} | workers
    leader = sets[gang.name]
    assert leader["spec"]["replicas"] == replicas
    (owner,) = leader["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("LeaderWorkerSet", gang.name)
    for name in workers:
        assert sets[name]["spec"]["replicas"] == size - 1
        (owner,) = sets[name]["metadata"]["ownerReferences"]  # the group's leader pod owns it
        assert (owner["kind"], owner["name"]) == ("Pod", name)
    for s in sets.values():
        assert s["status"].get("readyReplicas") == s["spec"]["replicas"], s["status"]


def test_every_pod_bound_by_the_scheduler_with_its_gpus_allocated(gang: Gang, available) -> None:
    pods = gang.pods()
    spec = gang.lws["spec"]
    assert len(pods) == spec["replicas"] * spec["leaderWorkerTemplate"]["size"]
    role_template = {
        role: spec["leaderWorkerTemplate"][f"{role.lower()}Template"]["spec"]["resourceClaims"][0]
        for role in ("Leader", "Worker")
    }
    nodes = set()
    for pod in pods:
        name = pod["metadata"]["name"]
        node = pod["spec"].get("nodeName")
        assert node, f"{name} is not bound"
        assert _condition(pod, "PodScheduled") == "True", name
        nodes.add(node)
        template_ref = role_template[pod["metadata"]["labels"]["modelplane.ai/role"]]
        template = gang.templates[template_ref["resourceClaimTemplateName"]]
        (request,) = template["spec"]["spec"]["devices"]["requests"]
        (claim_status,) = pod["status"]["resourceClaimStatuses"]
        assert claim_status["name"] == template_ref["name"]
        claim = gang.api.get(*CLAIM, claim_status["resourceClaimName"], gang.namespace)
        assert claim is not None, name
        (claimed,) = claim["spec"]["devices"]["requests"]
        assert claimed["exactly"]["deviceClassName"] == "gpu.nvidia.com"
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == request["exactly"]["count"] == 8, name
        assert {(r["driver"], r["pool"], r["request"]) for r in results} == {
            ("gpu.nvidia.com", node, request["name"])
        }
        assert len({r["device"] for r in results}) == len(results)
        reserved = {r["uid"] for r in claim["status"]["reservedFor"]}
        assert reserved == {pod["metadata"]["uid"]}, name
    assert len(nodes) == len(pods)  # eight GPUs a node, eight a pod: one pod per node


def test_lws_labelled_the_pods_and_gave_them_the_leader_address(gang: Gang, available) -> None:
    pods = {p["metadata"]["name"]: p for p in gang.pods()}
    leader_name, worker_name = f"{gang.name}-0", f"{gang.name}-0-1"
    assert set(pods) == {leader_name, worker_name}
    leader, worker = pods[leader_name], pods[worker_name]
    for pod, index, role in ((leader, "0", "Leader"), (worker, "1", "Worker")):
        labels = pod["metadata"]["labels"]
        assert labels[lws.NAME_LABEL] == gang.name
        assert labels[lws.GROUP_INDEX_LABEL] == "0"
        assert labels[lws.WORKER_INDEX_LABEL] == index
        assert labels["modelplane.ai/role"] == role
        (engine,) = pod["spec"]["containers"]
        env = [e["name"] for e in engine["env"]]
        values = {e["name"]: e.get("value") for e in engine["env"]}
        # the Pod webhook's variables, ahead of plnt's that refer to them (the kubelet expands
        # $(VAR) only from variables defined earlier)
        assert values["LWS_LEADER_ADDRESS"] == f"{leader_name}.{gang.name}.{gang.namespace}"
        assert values["LWS_WORKER_INDEX"] == index
        assert values["LWS_GROUP_SIZE"] == "2"
        assert env.index("LWS_LEADER_ADDRESS") < env.index("MODELPLANE_LEADER_ADDRESS")
        assert values["MODELPLANE_LEADER_ADDRESS"] == "$(LWS_LEADER_ADDRESS)"
    assert leader["metadata"]["labels"][lws.GROUP_KEY_LABEL]
    assert (
        worker["metadata"]["labels"][lws.GROUP_KEY_LABEL]
        == leader["metadata"]["labels"][lws.GROUP_KEY_LABEL]
    )


def test_kwok_made_the_pods_ready_and_the_lws_is_available(gang: Gang, available) -> None:
    for pod in gang.pods():
        assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]
        assert _condition(pod, "Ready") == "True", pod["metadata"]["name"]
    status = available["status"]
    assert status["readyReplicas"] == status["replicas"] == gang.lws["spec"]["replicas"]
    assert _condition(available, "Available") == "True"
