"""Scenario 6: a function process and Crossplane core killed mid-reconcile and restarted.

Several ModelDeployments are applied at once; while Crossplane reconciles them the
model-deployment function and Crossplane core are SIGKILLed, then restarted. Every XR must
converge again with exactly its replicas (no duplicated ModelReplica, none orphaned), no pool
committed beyond its capacity, and nothing lost.
"""

from __future__ import annotations

import copy
import time

import yaml

from tests.e2e import fleet, live
from tests.e2e.stack import REPO

NS = "faults"
MD = ("modelplane.ai/v1alpha1", "ModelDeployment")
MR = ("modelplane.ai/v1alpha1", "ModelReplica")
DEPLOYMENTS = {"fault-a": 2, "fault-b": 1, "fault-c": 1}


def _deployments() -> list[dict]:
    base = yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
    out = []
    for name, replicas in DEPLOYMENTS.items():
        md = copy.deepcopy(base)
        md["metadata"] = {"name": name, "namespace": NS}
        md["spec"]["replicas"] = replicas
        out.append(md)
    return out


def test_killed_function_and_crossplane_lose_nothing(plane) -> None:
    fleet.ensure(plane)
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, *_deployments()]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    # Mid-reconcile: the first ModelReplicas are being composed.
    live.wait_for(lambda: plane.mgmt.list(*MR, namespace=NS), 120, "a first ModelReplica")
    plane.restart("plnt-function-model-deployment")
    plane.procs.stop("crossplane", kill=True)
    time.sleep(3)
    plane.start_crossplane()

    def converged() -> bool:
        for name, replicas in DEPLOYMENTS.items():
            md = plane.mgmt.get(*MD, name, NS)
            total = (((md or {}).get("status") or {}).get("replicas") or {}).get("total")
            if total != replicas or not live.is_true(md, "ReplicasScheduled"):
                return False
            if not live.is_true(md, "ReplicasBound"):
                return False
        return True

    live.wait_for(converged, 240, "every ModelDeployment placed again")
    owned: dict[str, list[str]] = {name: [] for name in DEPLOYMENTS}
    for replica in plane.mgmt.list(*MR, namespace=NS):
        owners = [o["name"] for o in replica["metadata"].get("ownerReferences") or []]
        assert len(owners) == 1 and owners[0] in DEPLOYMENTS, replica["metadata"]
        owned[owners[0]].append(replica["metadata"]["name"])
    assert {k: len(v) for k, v in owned.items()} == DEPLOYMENTS, owned

    # every replica rendered (bound), within the pool's devices (counted from what rendered);
    # a replica's engine Object is composed on its first reconcile after the binder commits it,
    # which may come a moment after its ModelDeployment reports every replica bound
    replicas = sorted(n for names in owned.values() for n in names)
    live.wait_for(
        lambda: sorted(fleet.rendered_gpus(plane, NS)) == replicas,
        60,
        "every replica's engine workload composed",
    )
    rendered = fleet.rendered_gpus(plane, NS)
    assert sorted(rendered) == sorted(n for names in owned.values() for n in names), rendered
    assert sum(rendered.values()) <= fleet.NODES * 8

    # nothing lost: the fleet itself is intact and still Ready
    assert live.is_true(
        plane.mgmt.get("modelplane.ai/v1alpha1", "InferenceCluster", fleet.CLUSTER), "Ready"
    )
    fleet.delete_namespace(plane, NS)
