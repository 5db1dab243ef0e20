"""The fleet view on a live Crossplane: what a ModelDeployment reconcile carries.

200 more InferenceClusters of 8 pools join the e2e fleet (two label sets of 100; Existing
clusters whose kubeconfig Secret does not exist, so they compose nothing and stay not Ready,
which is all the scheduler needs of them here). The binder (`plnt reconcile --bind-only`)
writes the fleet view; Crossplane answers the function's requirements from the API server.
The model-deployment function server logs each call's request and response bytes (`--debug`,
`plnt_host.runtime`); the test rebuilds the same request offline from the objects the API
server holds, as `plnt bench --only fleet` does, and compares: the sizes measured live are
those the benchmark's model predicts. Nothing here is simulated.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import time

import httpx
import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_deployment import fn
from plnt.capacity import fleet_view
from plnt_host import render
from tests.e2e import fleet, live
from tests.e2e.stack import REPO

API = "modelplane.ai/v1alpha1"
MD = (API, "ModelDeployment")
IC = (API, "InferenceCluster")
NS = "view-probe"
BULK_LABEL = "plnt.work/e2e-bulk"
BULK = 200
LINE = re.compile(
    r"function-model-deployment: (?P<xr>\S+) required\[(?P<answered>[^\]]*)\]: "
    r"request (?P<request>\d+) bytes, response (?P<response>\d+) bytes"
)


def _bulk_cluster(i: int) -> dict:
    return {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {
            "name": f"bulk-{i:03d}",
            "labels": {BULK_LABEL: "true", "plnt.work/e2e-bulk-group": f"g{i // 100}"},
        },
        "spec": {
            "cluster": {
                "source": "Existing",
                "existing": {
                    "secretRef": {"name": f"bulk-{i:03d}", "namespace": "plnt-system"},
                },
            },
            "nodePools": [
                {"name": f"h100-{j}", "className": fleet.CLASS, "nodeCount": 4} for j in range(8)
            ],
        },
    }


def _deployment(name: str, match_labels: dict[str, str]) -> dict:
    md = yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
    md["metadata"] = {"name": name, "namespace": NS}
    md["spec"]["replicas"] = 1
    md["spec"]["clusterSelector"] = {"matchLabels": match_labels}
    return md


def _index(plane) -> dict:
    cm = plane.mgmt.get("v1", "ConfigMap", fleet_view.INDEX_NAME, fleet_view.NAMESPACE) or {}
    return json.loads((cm.get("data") or {}).get(fleet_view.INDEX_KEY) or "{}")


@pytest.fixture(scope="module")
def bulk(plane):
    fleet.ensure(plane)
    before = len(plane.mgmt.list(*IC))
    docs = [_bulk_cluster(i) for i in range(BULK)]
    for doc in docs:  # one request each (kubectl's client-side rate limit made 200 take minutes)
        plane.mgmt.apply(doc)
    plane.kubectl("create", "namespace", NS)
    live.wait_for(
        lambda: _index(plane).get("clusters") == before + BULK, 180, "the view of every cluster"
    )
    yield before + BULK
    # The deployments before their namespace: a namespace deleted while provider-kubernetes
    # Objects are still in it can stay Terminating for good (crossplane-runtime#1010: the
    # provider cannot record its ProviderConfigUsage there; seen here, docs/workflow-run.md).
    plane.kubectl("delete", "modeldeployment", "--all", "-n", NS, "--wait=false")

    # Deletecollection: `kubectl delete -l` timed out (120 s) deleting 200 on a loaded run. It
    # took 3.6 s alone, but beside the 200 clusters' own reconciles in a full run the server hit
    # its 60 s request timeout with some deleted (answering 504, or dropping the connection); so
    # it is repeated until every bulk cluster is being deleted.
    def delete_bulk() -> bool:
        path, selector = plane.mgmt.path(*IC), {"labelSelector": f"{BULK_LABEL}=true"}
        try:
            gone = plane.mgmt.http.delete(path, params=selector, timeout=90)
        except httpx.TransportError:  # the server gave up; what it deleted stays deleted
            pass
        else:
            assert gone.status_code in (200, 504), gone.text
        left = plane.mgmt.list(*IC, labels={BULK_LABEL: "true"})
        return not [o for o in left if not o["metadata"].get("deletionTimestamp")]

    live.wait_for(delete_bulk, 420, "the bulk clusters to be deleted")
    live.wait_for(lambda: _index(plane).get("clusters") == before, 180, "the view to shrink")
    fleet.delete_namespace(plane, NS, gone=120)


def _calls(plane, name: str) -> list[dict]:
    text = (plane.dir / "logs" / "plnt-function-model-deployment.log").read_text(errors="replace")
    out = []
    for m in LINE.finditer(text):
        if m["xr"] == f"{NS}/{name}":
            answered = dict(a.split("=") for a in m["answered"].split(",") if a)
            out.append({**m.groupdict(), "answered": {k: int(v) for k, v in answered.items()}})
    return out


def _offline(plane, xr: dict) -> tuple[fnv1.RunFunctionRequest, fnv1.RunFunctionResponse]:
    """The request Crossplane would send, rebuilt from what the API server holds now: the XR,
    its composed ModelReplicas and ModelEndpoints observed, every requirement answered from
    the objects its selector matches (as the benchmark builds them)."""
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for ref in xr["spec"].get("crossplane", {}).get("resourceRefs") or []:
        obj = plane.mgmt.get(ref["apiVersion"], ref["kind"], ref["name"], NS)
        if obj is not None:
            key = (obj["metadata"].get("annotations") or {}).get(
                "crossplane.io/composition-resource-name", ref["name"]
            )
            req.observed.resources[key].resource.update(obj)
    pool = [
        *plane.mgmt.list(API, "InferenceClass"),
        *plane.mgmt.list(*IC),
        *plane.mgmt.list("v1", "ConfigMap", namespace=fleet_view.NAMESPACE),
    ]
    rsp, req = render.run_with_requirements(fn.run_function, req, pool, "model-deployment")
    return req, rsp


def _inputs(plane, xr: dict) -> dict[str, str]:
    """The resourceVersions of what the XR's reconcile is sent besides the XR itself: its
    composed resources and the fleet view."""
    refs = xr["spec"].get("crossplane", {}).get("resourceRefs") or []
    composed = [plane.mgmt.get(r["apiVersion"], r["kind"], r["name"], NS) for r in refs]
    view = [
        cm
        for cm in plane.mgmt.list("v1", "ConfigMap", namespace=fleet_view.NAMESPACE)
        if cm["metadata"]["name"].startswith(fleet_view.INDEX_NAME)
    ]
    return {
        f"{o.get('kind')}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
        for o in [*composed, *view]
        if o is not None
    }


def _whole_fleet_bytes(plane) -> int:
    """What the same reconcile carried before the view: every InferenceCluster and ModelReplica."""
    objs = plane.mgmt.list(*IC) + plane.mgmt.list(API, "ModelReplica")
    out = fnv1.Resources()
    for obj in objs:
        out.items.add().resource.update(obj)
    return out.ByteSize()


@pytest.mark.parametrize(
    ("name", "labels", "parts", "scheduled", "composed"),
    [
        ("view-one", {"modelplane.ai/region": "eu-west"}, 1, "True", 2),
        ("view-bulk", {BULK_LABEL: "true"}, 2, "False", 0),
    ],
    ids=["one-cluster", "bulk-200"],
)
def test_a_reconcile_carries_the_view_it_predicts(
    plane, bulk, name, labels, parts, scheduled, composed
):
    md = _deployment(name, labels)
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(md))
    live.wait_object(
        plane.mgmt, *MD, name, NS,
        until=lambda o: live.condition(o, "ReplicasScheduled").get("status") == scheduled
        and len(o["spec"].get("crossplane", {}).get("resourceRefs") or []) == composed,
        seconds=180,
    )  # fmt: skip
    # One more reconcile, now that what it composed exists: the call to compare with offline.
    # Offline reads the objects as they are after the call, so the call counts only if its
    # reconcile was the only one since the probe's annotation and nothing it was sent changed
    # meanwhile: not its composed resources or the view (a replica's status written after the
    # call made it 3.2 KB smaller than predicted), and not the XR itself (a reconcile still in
    # flight from before the annotation, or a status the call's own result changed, made it
    # 1.8 KB smaller).
    changes: list[set[str]] = []
    deadline = time.monotonic() + 180
    for probe in itertools.count():
        sent = _inputs(plane, plane.mgmt.get(*MD, name, NS))
        before = len(_calls(plane, name))
        annotated = plane.kubectl(
            "annotate", "modeldeployment", name, "-n", NS, f"plnt.work/e2e-probe={probe}",
            "--overwrite", "-o", "jsonpath={.metadata.resourceVersion}",
        ).strip()  # fmt: skip
        live.wait_for(
            lambda before=before: [
                c for c in _calls(plane, name)[before:] if "fleet-view" in c["answered"]
            ],
            60, f"a logged call for {name} with the view answered",
        )  # fmt: skip
        time.sleep(2)  # a second call the annotation queued behind one in flight lands
        # a reconcile is several calls, until what it requires is answered: count the last ones
        calls = [c for c in _calls(plane, name)[before:] if "fleet-view" in c["answered"]]
        xr = plane.mgmt.get(*MD, name, NS)
        now = _inputs(plane, xr)
        if now == sent and len(calls) == 1 and xr["metadata"]["resourceVersion"] == annotated:
            break
        changes.append({k for k in sent.keys() | now.keys() if sent.get(k) != now.get(k)})
        if xr["metadata"]["resourceVersion"] != annotated:
            changes[-1].add(f"{name} (written after the annotation)")
        if len(calls) != 1:
            changes[-1].add(f"{len(calls)} reconciles")
        if time.monotonic() > deadline:
            raise AssertionError(f"what {name}'s reconcile reads kept changing: {changes}")
        time.sleep(2)  # let what is in flight land
    last = calls[-1]
    assert last["answered"]["fleet-view-index"] == 1
    assert last["answered"]["fleet-view"] == parts, last
    assert not {"inference-clusters", "model-replicas"} & set(last["answered"]), last
    if scheduled == "False":
        # the view held only the 200 it selected; the index still counts the whole fleet
        message = live.condition(xr, "ReplicasScheduled")["message"]
        assert "cluster bulk-000: not Ready" in message, message
        assert f"{bulk - BULK} clusters do not match clusterSelector" in message, message

    req, rsp = _offline(plane, copy.deepcopy(xr))
    predicted_req, predicted_rsp = req.ByteSize(), rsp.ByteSize()
    measured_req, measured_rsp = int(last["request"]), int(last["response"])
    whole = _whole_fleet_bytes(plane)
    print(
        f"{name}: request {measured_req} B live, {predicted_req} B predicted; response "
        f"{measured_rsp} B live, {predicted_rsp} B predicted; the whole fleet alone {whole} B"
    )
    assert 0.9 <= measured_req / predicted_req <= 1.1, (measured_req, predicted_req)
    assert 0.9 <= measured_rsp / predicted_rsp <= 1.1, (measured_rsp, predicted_rsp)
    assert measured_req < whole / 2, (measured_req, whole)
