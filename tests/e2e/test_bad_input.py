"""Scenario 4: bad input on live objects explains itself where users look (`kubectl describe`),
and a shortfall is loud.

Crossplane discards an XR's desired status when a step returns a Fatal result and keeps only
Synced=False (with the result's message) and an event; these tests read what actually lands.
"""

from __future__ import annotations

import copy

import yaml

from tests.e2e import fleet, live
from tests.e2e.stack import REPO

NS = "bad-input"
MD = ("modelplane.ai/v1alpha1", "ModelDeployment")
WR = ("plnt.work/v1", "WorkflowRun")


def _namespace(plane) -> None:
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )


def _deployment(name: str, *, replicas: int, gpus: int, cel: str) -> dict:
    md = yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
    md = copy.deepcopy(md)
    md["metadata"] = {"name": name, "namespace": NS}
    md["spec"]["replicas"] = replicas
    device = md["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"][0]
    device["count"] = gpus
    device["selectors"] = [{"cel": cel}]
    return md


def test_invalid_selector_explains_itself_on_the_object(plane) -> None:
    fleet.ensure(plane)
    _namespace(plane)
    md = _deployment("bad-cel", replicas=1, gpus=1, cel='device.attributes["gpu.nvidia.com"].(')
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(md))
    field = "spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel"
    # Not Fatal (which would discard the status): the replicas cannot be scheduled, and the
    # condition says why, naming the field; the step's Warning result becomes an event.
    obj = live.wait_object(
        plane.mgmt,
        *MD,
        "bad-cel",
        NS,
        until=lambda o: (
            live.condition(o, "ReplicasScheduled").get("reason") == "InvalidNodeSelector"
        ),
        what="ReplicasScheduled InvalidNodeSelector on an invalid ModelDeployment",
    )
    scheduled = live.condition(obj, "ReplicasScheduled")
    assert scheduled["status"] == "False" and field in scheduled["message"], scheduled
    assert "Syntax error" in scheduled["message"], scheduled
    assert not live.is_true(obj, "Ready")
    described = plane.kubectl("describe", "modeldeployment", "bad-cel", "-n", NS)
    assert field in described
    events = live.wait_for(
        lambda: [
            e
            for e in live.events_for(plane.mgmt, NS, "bad-cel")
            if e["type"] == "Warning" and field in e["message"]
        ],
        60,
        "a Warning event naming the field",
    )
    assert events
    assert plane.mgmt.list("modelplane.ai/v1alpha1", "ModelReplica", namespace=NS) == []


def test_invalid_workflow_run_ends_failed_naming_the_field(plane) -> None:
    fleet.ensure(plane)
    _namespace(plane)
    wr = yaml.safe_load((REPO / "examples" / "workflowrun-llama-70b" / "xr.yaml").read_text())
    wr["metadata"] = {"name": "unknown-gpu", "namespace": NS}
    wr["spec"]["resources"]["gpuClass"] = "nvidia.com/b300"  # no InferenceClass offers it
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(wr))
    obj = live.wait_object(
        plane.mgmt,
        *WR,
        "unknown-gpu",
        NS,
        until=lambda o: (o.get("status") or {}).get("phase") == "Failed",
        what="phase Failed on an invalid WorkflowRun",
    )
    text = yaml.safe_dump(obj["status"])
    assert "spec.resources.gpuClass" in text, text
    assert "nvidia.com/h100" in text, "the refusal lists the classes the fleet has"
    described = plane.kubectl("describe", "workflowrun", "unknown-gpu", "-n", NS)
    assert "spec.resources.gpuClass" in described


def test_shortfall_is_reported_per_cluster(plane) -> None:
    """More 8-GPU replicas than the fleet has nodes: ReplicasScheduled False, each cluster's
    reason in the message, and the XR not Ready."""
    fleet.ensure(plane)
    _namespace(plane)
    cel = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("70Gi")) >= 0'
    md = _deployment("too-big", replicas=fleet.NODES + 3, gpus=8, cel=cel)
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(md))
    obj = live.wait_object(
        plane.mgmt,
        *MD,
        "too-big",
        NS,
        until=lambda o: live.condition(o, "ReplicasScheduled").get("status") == "False",
        what="ReplicasScheduled False",
    )
    cond = live.condition(obj, "ReplicasScheduled")
    assert fleet.CLUSTER in cond["message"], cond
    assert not live.is_true(obj, "Ready")
    plane.kubectl("delete", "modeldeployment", "too-big", "-n", NS, "--wait=false")
