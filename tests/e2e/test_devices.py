"""Devices only through DRA claims, live (docs/tenancy.md, "Devices outside DRA"): a
ModelDeployment whose engine asks for `nvidia.com/gpu` in its resources is refused by the
ModelDeployment function before anything is composed. No ModelReplica is created, nothing
reaches the workload cluster, and the condition and a Warning event name the container and
the field; the same deployment without that limit places and runs there."""

from __future__ import annotations

import copy
import time
from typing import Any

import yaml

from tests.e2e import fleet, live
from tests.e2e.stack import REPO

API = "modelplane.ai/v1alpha1"
NS = "devices"
FIELD = 'spec.engines[0].members[0].template.spec.containers[0].resources.limits["nvidia.com/gpu"]'


def _deployment(name: str, limits: dict[str, Any] | None) -> dict[str, Any]:
    md = yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
    md = copy.deepcopy(md)
    md["metadata"] = {"name": name, "namespace": NS}
    md["spec"]["replicas"] = 1
    if limits is not None:
        engine = md["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
        engine["resources"]["limits"] = limits
    return md


def test_a_gpu_limit_is_refused_before_anything_reaches_the_workload_cluster(plane) -> None:
    fleet.ensure(plane)
    plane.kubectl(
        "apply", "-f", "-",
        stdin=yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )  # fmt: skip
    workload = plane.workload(fleet.CLUSTER)
    try:
        plane.kubectl(
            "apply", "-f", "-", stdin=yaml.safe_dump(_deployment("greedy", {"nvidia.com/gpu": 8}))
        )
        md = live.wait_object(
            plane.mgmt, API, "ModelDeployment", "greedy", NS,
            until=lambda o: (
                live.condition(o, "ReplicasScheduled").get("reason") == "TemplateNotPermitted"
            ),
            what="ReplicasScheduled TemplateNotPermitted",
            seconds=180,
        )  # fmt: skip
        scheduled = live.condition(md, "ReplicasScheduled")
        assert scheduled["status"] == "False", scheduled
        assert FIELD in scheduled["message"], scheduled
        assert "container engine asks for nvidia.com/gpu" in scheduled["message"], scheduled
        assert not live.is_true(md, "Ready")
        events = live.wait_for(
            lambda: [
                e
                for e in live.events_for(plane.mgmt, NS, "greedy")
                if e["type"] == "Warning" and FIELD in e["message"]
            ],
            60,
            "a Warning event naming the field",
        )
        assert events
        time.sleep(10)  # a binder pass and a provider poll: still nothing anywhere
        assert plane.mgmt.list(API, "ModelReplica", namespace=NS) == []
        assert plane.mgmt.list("kubernetes.m.crossplane.io/v1alpha1", "Object", namespace=NS) == []
        assert workload.list("apps/v1", "Deployment", namespace=NS) == []
        assert workload.list("v1", "Pod", namespace=NS) == []

        # the control: the same deployment without the limit runs on that cluster
        plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(_deployment("fair", None)))
        live.wait_for(
            lambda: workload.list("apps/v1", "Deployment", namespace=NS),
            300,
            "the deployment without the GPU limit rendered on the workload cluster",
        )
        assert plane.mgmt.list(API, "ModelReplica", namespace=NS, labels={
            "modelplane.ai/deployment": "greedy"}) == []  # fmt: skip
    finally:
        fleet.delete_namespace(plane, NS)
