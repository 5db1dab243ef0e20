"""Tenancy on a live Crossplane (docs/tenancy.md), with the binder running:

- a tenant's forged binding: a ModelReplica made by hand in a namespace whose InferenceQuota
  admits nothing, carrying a `plnt.work/binding` its author computed with plnt's public code,
  renders nothing on the workload cluster; its Bound condition says BindingForged and a Warning
  event says why;
- two namespaces with quotas of 20 GPUs each compete for one 32-GPU pool: sampled every second
  from what was rendered (Objects on the management cluster, not the ledger), neither ever holds
  more than its quota nor both more than the pool; `kubectl get inferencequota` shows the use;
- the cluster fenced against a namespace: its ModelDeployment places nothing and says
  "cluster lab-h100 does not admit namespace ...".
"""

from __future__ import annotations

import json
import time
from typing import Any

import yaml

from plnt.capacity import binding
from tests.e2e import fleet, live
from tests.e2e.stack import REPO

API = "modelplane.ai/v1alpha1"
QUOTA_GPUS, ASKED = 20, 6  # per namespace: six 4-GPU replicas asked, five allowed
GPUS = 4
TEAMS = ("team-a", "team-b")


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def quota(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceQuota",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
            "hard": {"devices": {"gpu.nvidia.com": gpus}},
        },
    }


def deployment(name: str, ns: str, replicas: int) -> dict[str, Any]:
    md = yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
    md["metadata"] = {"name": name, "namespace": ns}
    md["spec"]["replicas"] = replicas
    (device,) = md["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"]
    device["count"] = GPUS
    return md


def forged_replica(plane, ns: str) -> dict[str, Any]:
    """The seed ModelReplica pinned onto the live fleet, with a binding its author wrote for
    the spec exactly as the API server stores it (defaults filled in, read back through a
    server-side dry run), as a careful forger would."""
    mr = yaml.safe_load((REPO / "examples" / "model-replica-qwen3-8b" / "xr.yaml").read_text())
    mr["metadata"] = {"name": "forged", "namespace": ns}
    mr["spec"]["clusterName"] = fleet.CLUSTER
    mr["spec"]["engines"][0]["members"][0]["nodePoolName"] = "h100"
    stored = json.loads(
        plane.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(mr))
    )
    mr["spec"] = stored["spec"]
    digest = binding.state_of(mr).digest
    mr["metadata"]["annotations"] = {
        binding.BINDING: binding.binding_json(digest, fleet.CLUSTER, {}, replica=f"{ns}/forged")
    }
    return mr


def _objects_of(plane, ns: str) -> list[dict[str, Any]]:
    return plane.mgmt.list("kubernetes.m.crossplane.io/v1alpha1", "Object", namespace=ns)


def test_a_forged_binding_renders_nothing_on_the_workload_cluster(plane) -> None:
    fleet.ensure(plane)
    ns = "tenant-forger"
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([namespace(ns), quota(ns, 0)]))
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(forged_replica(plane, ns)))
    try:
        mr = live.wait_object(
            plane.mgmt, API, "ModelReplica", "forged", ns,
            until=lambda o: live.condition(o, "Bound").get("reason") == binding.BINDING_FORGED,
            seconds=120,
        )  # fmt: skip
        bound = live.condition(mr, "Bound")
        assert bound["status"] == "False"
        assert f"no entry for {ns}/forged" in bound["message"]
        # the binder refused it (the quota admits nothing), which binds nothing either
        live.wait_object(
            plane.mgmt, API, "ModelReplica", "forged", ns,
            until=lambda o: binding.REFUSED in (o["metadata"].get("annotations") or {}),
            seconds=60,
        )  # fmt: skip

        def forged_warnings() -> list[dict]:
            return [
                e
                for e in live.events_for(plane.mgmt, ns, "forged")
                if e.get("type") == "Warning" and binding.BINDING_FORGED in (e.get("message") or "")
            ]

        # Crossplane's event recorder sends Events from a queue of its own, after the reconcile
        # whose status already shows the refusal
        live.wait_for(forged_warnings, 60, f"a Warning Event naming {binding.BINDING_FORGED}")
        time.sleep(5)  # a few more reconciles: still nothing
        assert _objects_of(plane, ns) == []
        workload = plane.workload(fleet.CLUSTER)
        assert workload.list("apps/v1", "Deployment", namespace=ns) == []
    finally:
        fleet.delete_namespace(plane, ns)
        plane.kubectl("delete", "inferencequota", ns, "--wait=false")


def _clean(plane, namespaces: tuple[str, ...]) -> None:
    fleet.delete_namespace(plane, *namespaces)
    for ns in namespaces:
        plane.kubectl("delete", "inferencequota", ns, "--wait=false", "--ignore-not-found")


def test_two_namespaces_with_quotas_share_one_pool(plane) -> None:
    fleet.ensure(plane)
    pool = fleet.NODES * 8
    docs: list[dict[str, Any]] = []
    for ns in TEAMS:
        docs += [namespace(ns), quota(ns, QUOTA_GPUS)]
        docs += [deployment(f"{ns}-{i}", ns, 2) for i in range(ASKED // 2)]
    try:
        plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        full_since = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            held = {ns: sum(fleet.rendered_gpus(plane, ns).values()) for ns in TEAMS}
            for ns, gpus in held.items():
                assert gpus <= QUOTA_GPUS, f"{ns} holds {gpus} GPUs on a quota of {QUOTA_GPUS}"
            assert sum(held.values()) <= pool, f"{held} on a pool of {pool}"
            if sum(held.values()) == pool:
                full_since = full_since or time.monotonic()
                if time.monotonic() - full_since > 15:
                    break
            else:
                full_since = None
            time.sleep(1)
        assert sum(held.values()) == pool, held
        # the use is visible, and a namespace at its quota says so on its deployments
        out = plane.kubectl("get", "inferencequota", *TEAMS)
        header, rows = live.table(out)
        assert header[:3] == ["NAME", "USED", "HARD"], out
        used = {row[0]: row[1] for row in rows}
        for ns in TEAMS:
            assert "gpu.nvidia.com" in used[ns] and str(held[ns]) in used[ns], out
        # a deployment left short says why: its namespace's quota, or the full pool (both
        # limits meet here: a namespace at 20 of 20 when the pool is full is reported by
        # whichever the scheduler met first)
        for ns in TEAMS:
            for md in plane.mgmt.list(API, "ModelDeployment", namespace=ns):
                cond = live.condition(md, "ReplicasScheduled")
                if cond.get("status") == "False":
                    message = cond.get("message", "")
                    assert f"namespace {ns} holds" in message or "not enough free gpu" in message, (
                        message
                    )
    finally:
        _clean(plane, TEAMS)


def test_a_fenced_cluster_refuses_the_other_namespace(plane) -> None:
    fleet.ensure(plane)
    ns = "fenced-out"
    fence = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [ns]}
        ]
    }
    plane.kubectl(
        "patch", "inferencecluster", fleet.CLUSTER, "--type=merge",
        "-p", yaml.safe_dump({"spec": {"namespaceSelector": fence}}),
    )  # fmt: skip
    try:
        plane.kubectl(
            "apply", "-f", "-",
            stdin=yaml.safe_dump_all([namespace(ns), deployment("outside", ns, 1)]),
        )  # fmt: skip
        md = live.wait_object(
            plane.mgmt, API, "ModelDeployment", "outside", ns,
            until=lambda o: "does not admit" in live.condition(o, "ReplicasScheduled").get(
                "message", ""),
            seconds=180,
        )  # fmt: skip
        cond = live.condition(md, "ReplicasScheduled")
        assert cond["status"] == "False"
        assert f"cluster {fleet.CLUSTER} does not admit namespace {ns}" in cond["message"]
        assert plane.mgmt.list(API, "ModelReplica", namespace=ns) == []
    finally:
        plane.kubectl(
            "patch", "inferencecluster", fleet.CLUSTER, "--type=json",
            "-p", '[{"op": "remove", "path": "/spec/namespaceSelector"}]',
        )  # fmt: skip
        _clean(plane, (ns,))
