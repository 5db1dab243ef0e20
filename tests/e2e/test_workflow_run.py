"""Scenario 3: seed 000's WorkflowRun on the live fleet, through every phase, two updates, delete.

The replicas' engine is llama.cpp's llama-server serving a tiny GGUF behind the simulated
gateway data plane (tests/e2e/engines.py), so the canary gate measures real tokens; the slow
canary is a `plnt.gate.fake_server` engine, whose latency the test chooses. No GPU runs here:
kube-scheduler binds the pods and allocates their DRA claims, and kwok holds a pod with init
containers (the weights download) unready for its staging time, so PullingWeights is seen.
Everything else, the phases, the gate, canaries, promotion, rollback and deletion, is plnt in a
real Crossplane. The run's endpoint, `<service>.default.svc.cluster.local:8000`, is called from
inside the control plane's network namespace through the Service's cluster IP (the simulator
stands in for kube-proxy; the test, reading the Service, for the cluster's DNS).
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
import yaml

from functions.model_replica import pods
from plnt.gate.fake_server import Behaviour
from tests.e2e import engines, fleet, live
from tests.e2e.stack import REPO

SEED = REPO / "examples" / "workflowrun-llama-70b" / "xr.yaml"
NAME = "llama-3.1-70b-instruct"
NS = "default"
WR = ("plnt.work/v1", "WorkflowRun")
MD = ("modelplane.ai/v1alpha1", "ModelDeployment")
MR = ("modelplane.ai/v1alpha1", "ModelReplica")
ME = ("modelplane.ai/v1alpha1", "ModelEndpoint")
MS = ("modelplane.ai/v1alpha1", "ModelService")
OBJECT = ("kubernetes.m.crossplane.io/v1alpha1", "Object")
COLLECTION = ("kubernetes.m.crossplane.io/v1alpha1", "ObservedObjectCollection")
SEED_PHASES = ["Validating", "PullingWeights", "Deploying", "SmokeTesting", "Promoting", "Ready"]
DELETE_BOUND_S = 10.0  # docs/workflow-run.md, "Delete"
PROMPT_S = 8.0  # a prompt to PROMPT_S_ENGINE: 16 tokens 500 ms apart; 4 at a time, 10 in 3 rounds
PROMPT_S_ENGINE = Behaviour(ttft_ms=20, tpot_ms=500, tokens=16)
SERVICE = "llama-3-1-70b-instruct"  # the run's name, its dots made dashes (a Service name)
ENDPOINT = f"{SERVICE}.{NS}.svc.cluster.local:8000"


def _phase(obj: dict) -> str | None:
    return (obj.get("status") or {}).get("phase")


def _replicas(plane) -> list[dict]:
    return plane.mgmt.list(*MR, namespace=NS, labels={"modelplane.ai/deployment": NAME})


def _weights(service: dict) -> tuple[tuple[str, float], ...]:
    """The ModelService's traffic: (endpoint, percent) per endpoint."""
    weights = (service.get("status") or {}).get("weights") or []
    return tuple(sorted((w["endpoint"], w.get("percent", 0)) for w in weights))


def _by_revision(weights: tuple[tuple[str, float], ...], **revisions: str) -> dict[str, float]:
    """Traffic percent per role, from endpoint names (a replica's name carries its revision's
    first six characters, as plnt names it)."""
    out: dict[str, float] = {}
    for endpoint, percent in weights:
        role = next(r for r, rev in revisions.items() if f"-{rev[:6]}-" in endpoint)
        out[role] = out.get(role, 0) + percent
    return out


def _phase_and_why(obj: dict) -> tuple[str | None, str, str | None]:
    """The phase, what the Serving condition says about it, and the run id."""
    why = (live.condition(obj, "Serving") or {}).get("message", "")
    return _phase(obj), why, (obj.get("status") or {}).get("workflowRunId")


def _phases(seen: list[tuple[str | None, str, str | None]]) -> list[str | None]:
    """The phase each time it changes, as `kubectl get -w` prints it (before the first
    status write there is none)."""
    out: list[str | None] = []
    for phase, *_ in seen:
        if phase is not None and (not out or out[-1] != phase):
            out.append(phase)
    return out


def _ready(obj: dict) -> bool:
    return _phase(obj) == "Ready" and bool((obj.get("status") or {}).get("endpoint"))


def _real_engine(namespace: str, replica: str) -> engines.Engine:
    return engines.LLAMA_SERVER if namespace == NS else engines.FAST


def _composed_owners_of_crossplane_spec(obj: dict) -> dict[str, object]:
    """What each composing field manager (a composite applying what it composes) owns under
    obj's spec.crossplane: nothing, when every composite leaves that to obj's own reconciler."""
    out = {}
    for entry in obj["metadata"].get("managedFields") or []:
        owned = ((entry.get("fieldsV1") or {}).get("f:spec") or {}).get("f:crossplane")
        if entry["manager"].startswith("apiextensions.crossplane.io/composed/") and owned:
            out[entry["manager"]] = owned
    return out


@pytest.fixture(scope="module")
def created(plane):
    """The seed WorkflowRun applied with kubectl, watched from the first write to Ready."""
    fleet.ensure(plane)
    seed = yaml.safe_load(SEED.read_text())
    assert seed["metadata"] == {"name": NAME, "namespace": NS}
    # the seed's replicas are served by llama.cpp's llama-server: the gate measures real tokens
    # (started now: started on the first prompt, its start-up was that prompt's TTFT)
    plane.simulator.engines.llama_server()
    plane.simulator.engines.policy = _real_engine
    watch = live.Watch(plane.mgmt, *WR, NAME, NS, _phase_and_why)
    plane.kubectl("apply", "-f", str(SEED))
    try:
        wr = live.wait_object(plane.mgmt, *WR, NAME, NS, until=_ready, seconds=300)
        # the watch stream may deliver the last write a moment after the GET that saw it
        live.wait_for(
            lambda: [v[0] for v in watch.values[-1:]] == ["Ready"], 30, "the watch to see Ready"
        )
    finally:
        seen = watch.stop()
    return wr, seen


def test_create_walks_the_seed_phases_to_ready(plane, created) -> None:
    wr, seen = created
    phases = _phases(seen)
    story = "\n".join(f"{phase}: {why} ({run})" for phase, why, run in seen)
    assert phases == SEED_PHASES, story  # exactly the seed's, not a subsequence
    # Crossplane writes spec.crossplane (and so bumps the generation) during the rollout;
    # the run is the user's spec's, so it never changes
    assert len({run for *_, run in seen if run}) == 1, story
    assert "Failed" not in phases and "RolledBack" not in phases, phases
    status = wr["status"]
    assert status["workflowRunId"].startswith("r-")
    assert status["observedGeneration"] == wr["metadata"]["generation"]

    assert status["endpoint"] == ENDPOINT
    assert status["address"] == f"{SERVICE}.{NS}.svc:8000"
    assert status["url"].endswith(f"/{NS}/{NAME}"), status
    header, rows = live.table(plane.kubectl("get", "workflowrun", "-n", NS))
    assert header[:5] == ["NAME", "RUNTIME", "GPU", "PHASE", "ENDPOINT"], header
    assert rows[0][:5] == [NAME, "vllm", "nvidia.com/h100", "Ready", f"{SERVICE}.{NS}.svc:8000"]
    header, rows = live.table(plane.kubectl("get", "workflowrun", "-n", NS, "-o", "wide"))
    assert header[:6] == ["NAME", "RUNTIME", "GPU", "PHASE", "ENDPOINT", "URL"], header
    assert rows[0][5] == status["url"]


def test_first_rollout_was_smoke_tested_once(plane, created) -> None:
    """The gate measured the first revision with the seed's 10 prompts, exactly once, and its
    figures are in status."""
    md = plane.mgmt.get(*MD, NAME, NS)
    gate = md["status"]["canary"]["gate"]
    assert gate["verdict"] == "Pass", gate
    assert gate["revision"] == md["status"]["revisions"]["stable"]
    assert gate["ttftMs"]["p95"] <= 250 and gate["tpotMs"]["p95"] <= 40, gate
    replicas = _replicas(plane)
    assert len(replicas) == 1  # replicas.min
    measured = sum(plane.simulator.engines.count(NS, r["metadata"]["name"]) for r in replicas)
    assert measured == 10
    # every one answered by llama-server, streaming real tokens
    assert plane.simulator.engines.answered_by[engines.LLAMA_SERVER] >= measured
    assert gate["tpotMs"]["p95"] > 0 and gate["ttftMs"]["p95"] > 0, gate


def test_a_ready_replica_keeps_track_of_what_it_composed(plane, created) -> None:
    """A ModelReplica's spec.crossplane is its own reconciler's: the ModelDeployment that
    composes the replica never applies it (from an older observation it would overwrite the
    references to what the replica composed since, and Crossplane would never delete those).
    Once every copy is available the replica's pod collection goes, Objects and all."""
    (replica,) = _replicas(plane)
    name = replica["metadata"]["name"]
    assert _composed_owners_of_crossplane_spec(replica) == {}, name
    refs = replica["spec"]["crossplane"]["resourceRefs"]
    assert {r["kind"] for r in refs} >= {"Object"}, refs

    def collection_gone() -> bool:
        return not any(
            o["metadata"]["name"].startswith(f"{name}-")
            for o in plane.mgmt.list(*COLLECTION, namespace=NS)
        )

    def pod_objects_gone() -> bool:
        return not any(
            pods.MEMBERSHIP_LABEL in (o["metadata"].get("labels") or {})
            for o in plane.mgmt.list(*OBJECT, namespace=NS)
        )

    live.wait_for(collection_gone, 60, f"{name}'s pod collection gone")
    live.wait_for(pod_objects_gone, 60, "the collection's pod Objects gone")


def test_a_pod_of_the_control_plane_streams_an_answer_from_the_endpoint(plane, created) -> None:
    """`http://<status.endpoint>/v1/chat/completions`, called from inside the control plane's
    network namespace (where this thread runs), streams tokens from the model: the Service's
    cluster IP, its EndpointSlice (the control-plane Gateway), the route on the Service's name,
    the replica's route on the workload cluster, llama-server."""
    wr, _ = created
    host, _, port = wr["status"]["endpoint"].rpartition(":")
    service = plane.mgmt.get("v1", "Service", SERVICE, NS)
    assert service is not None and "selector" not in service["spec"]
    assert [p["port"] for p in service["spec"]["ports"]] == [8000]
    # What stands in for the cluster's DNS: the A record CoreDNS serves for
    # <service>.<namespace>.svc.cluster.local is the Service's spec.clusterIP, read here from
    # the API server. The Host header is the name, as a client that resolved it sends it.
    assert host == f"{SERVICE}.{NS}.svc.cluster.local"
    cluster_ip = service["spec"]["clusterIP"]
    assert cluster_ip.startswith("10.96.0."), cluster_ip  # the API server's service range
    replicas = [r["metadata"]["name"] for r in _replicas(plane)]
    before = sum(plane.simulator.engines.count(NS, r) for r in replicas)
    answered = plane.simulator.engines.answered_by[engines.LLAMA_SERVER]
    body = {
        "model": "meta-llama/Llama-3.1-70B-Instruct",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "stream": True,
    }
    text, done = [], False
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST",
            f"http://{cluster_ip}:{port}/v1/chat/completions",
            headers={"Host": f"{host}:{port}"},
            json=body,
        ) as rsp,
    ):
        assert rsp.status_code == 200, rsp.read()
        assert rsp.headers["content-type"].startswith("text/event-stream")
        for line in rsp.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                for choice in json.loads(line.removeprefix("data: ")).get("choices") or []:
                    text.append((choice.get("delta") or {}).get("content") or "")
    assert done and "".join(text), text  # streamed, ended, with generated text
    # it went through the replica's route on the workload cluster to llama-server
    assert sum(plane.simulator.engines.count(NS, r) for r in replicas) == before + 1
    assert plane.simulator.engines.answered_by[engines.LLAMA_SERVER] == answered + 1


def test_update_is_a_fresh_run_with_a_canary_that_promotes(plane, created) -> None:
    before = plane.mgmt.get(*WR, NAME, NS)
    run = before["status"]["workflowRunId"]
    stable = plane.mgmt.get(*MD, NAME, NS)["status"]["revisions"]["stable"]
    watch = live.Watch(plane.mgmt, *WR, NAME, NS, _phase_and_why)
    traffic = live.Watch(plane.mgmt, *MS, NAME, NS, _weights)
    plane.kubectl(
        "patch",
        "workflowrun",
        NAME,
        "-n",
        NS,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"model": {"quantization": "fp8"}}}),
    )
    md = live.wait_object(
        plane.mgmt,
        *MD,
        NAME,
        NS,
        until=lambda o: bool(((o.get("status") or {}).get("revisions") or {}).get("canary")),
        what="a canary revision",
    )
    assert md["status"]["canary"]["trafficPercent"] == 5
    canary = md["status"]["revisions"]["canary"]
    assert canary != stable
    try:
        wr = live.wait_object(
            plane.mgmt,
            *WR,
            NAME,
            NS,
            until=lambda o: _ready(o) and o["status"]["workflowRunId"] != run,
            seconds=300,
        )
        # the watch stream may deliver the last write a moment after the GET that saw it
        live.wait_for(
            lambda: [v[0] for v in watch.values[-1:]] == ["Ready"], 30, "the watch to see Ready"
        )
    finally:
        written = watch.stop()
        seen = traffic.stop()
    splits = [_by_revision(w, old=stable, new=canary) for w in seen if w]
    # the canary took its 5% before it took everything
    assert live.is_subsequence([{"old": 100}, {"old": 95, "new": 5}, {"new": 100}], splits), splits
    # an update that creates a new revision walks the seed's phases, exactly, as a create does
    story = "\n".join(f"{phase}: {why} ({run_id})" for phase, why, run_id in written)
    assert _phases(written) == ["Ready", *SEED_PHASES], story
    assert len({run_id for *_, run_id in written if run_id} - {run}) == 1, story
    md = plane.mgmt.get(*MD, NAME, NS)
    assert md["status"]["revisions"] == {"stable": canary}
    # the replaced revision's replicas go by foreground deletion, which may finish after Ready
    live.wait_for(
        lambda: (
            {r["metadata"]["labels"]["modelplane.ai/revision"] for r in _replicas(plane)}
            == {canary}
        ),
        120,
        "only the promoted revision's replicas left",
    )
    assert wr["status"]["observedGeneration"] == wr["metadata"]["generation"]


def test_slow_canary_rolls_back_and_the_stable_revision_keeps_all_traffic(plane, created) -> None:
    md = plane.mgmt.get(*MD, NAME, NS)
    stable = md["status"]["revisions"]["stable"]
    stable_replicas = {
        r["metadata"]["name"]
        for r in _replicas(plane)
        if r["metadata"]["labels"]["modelplane.ai/revision"] == stable
    }
    # a chosen latency: the canary's engine is a fake one, slow; the stable one stays real
    plane.simulator.engines.policy = lambda ns, replica: (
        engines.LLAMA_SERVER if replica in stable_replicas else engines.SLOW
    )
    try:
        plane.kubectl(
            "patch",
            "workflowrun",
            NAME,
            "-n",
            NS,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"resources": {"memoryGiB": 150}}}),
        )
        # Crossplane applies a function's desired status (the phase) and then, in a second write,
        # the conditions it returned (Serving): read both from the reconcile that rolled back
        wr = live.wait_object(
            plane.mgmt,
            *WR,
            NAME,
            NS,
            until=lambda o: (
                _phase(o) == "RolledBack"
                and live.condition(o, "Serving").get("reason") == "RolledBack"
            ),
            seconds=300,
        )
    finally:
        plane.simulator.engines.policy = _real_engine
    md = live.wait_object(
        plane.mgmt,
        *MD,
        NAME,
        NS,
        until=lambda o: not ((o.get("status") or {}).get("revisions") or {}).get("canary"),
    )
    assert md["status"]["revisions"]["stable"] == stable
    canary_cond = live.condition(md, "Canary")
    assert canary_cond["reason"] == "RolledBack"
    assert "TPOT" in canary_cond["message"] and "budget 40" in canary_cond["message"], canary_cond
    assert "TPOT" in live.condition(wr, "Serving").get("message", "") or "TPOT" in str(wr["status"])
    live.wait_object(
        plane.mgmt,
        *MS,
        NAME,
        NS,
        until=lambda o: (
            [w["percent"] for w in (o.get("status") or {}).get("weights") or []] == [100]
        ),
        what="all traffic back on the stable revision",
    )
    live.wait_for(
        lambda: {r["metadata"]["name"] for r in _replicas(plane)} == stable_replicas,
        120,
        "only the stable revision's replicas left",
    )
    assert wr["status"].get("endpoint"), "the stable revision still serves at the endpoint"


def test_an_invalid_update_fails_the_run_and_the_model_keeps_serving(plane, created) -> None:
    """An update to a gpuClass the fleet does not offer: phase Failed naming the field, while the
    ModelDeployment and ModelService are kept exactly as they were (their own references
    included: the run never writes them back), and the stable revision keeps all traffic.
    Undoing the update makes the run valid again."""
    wr = plane.mgmt.get(*WR, NAME, NS)
    gpu_class = wr["spec"]["resources"]["gpuClass"]
    stable = plane.mgmt.get(*MD, NAME, NS)["status"]["revisions"]["stable"]
    replicas = {r["metadata"]["name"] for r in _replicas(plane)}

    def patch(value: str) -> None:
        plane.kubectl(
            "patch", "workflowrun", NAME, "-n", NS, "--type=merge",
            "-p", json.dumps({"spec": {"resources": {"gpuClass": value}}}),
        )  # fmt: skip

    def valid(status: str):
        def check(o: dict) -> bool:
            cond = live.condition(o, "Valid")
            seen = (o.get("status") or {}).get("observedGeneration")
            return cond.get("status") == status and seen == o["metadata"]["generation"]

        return check

    patch("amd.com/mi300x")
    try:
        failed = live.wait_object(plane.mgmt, *WR, NAME, NS, until=valid("False"), seconds=120)
        assert _phase(failed) == "Failed", failed["status"]
        message = live.condition(failed, "Valid")["message"]
        assert message.startswith("spec.resources.gpuClass: "), message
        assert failed["status"].get("endpoint"), "the endpoint stays while the model serves"
        md = plane.mgmt.get(*MD, NAME, NS)
        assert md["status"]["revisions"] == {"stable": stable}
        assert {r["metadata"]["name"] for r in _replicas(plane)} == replicas
        assert _composed_owners_of_crossplane_spec(md) == {}
        assert _composed_owners_of_crossplane_spec(plane.mgmt.get(*MS, NAME, NS)) == {}
        assert [w["percent"] for w in plane.mgmt.get(*MS, NAME, NS)["status"]["weights"]] == [100]
    finally:
        patch(gpu_class)
    live.wait_object(plane.mgmt, *WR, NAME, NS, until=valid("True"), seconds=120)
    assert {r["metadata"]["name"] for r in _replicas(plane)} == replicas


def test_delete_cancels_the_smoke_test_and_leaves_nothing_behind(plane, created) -> None:
    """A smoke test in flight when the WorkflowRun is deleted stops within the documented bound
    (docs/workflow-run.md, "Delete"): no prompt reaches the replicas' routes after it, though
    the test would have gone on for two more rounds."""
    workload = plane.workloads[fleet.CLUSTER]
    sent = plane.simulator.engines
    sent.policy = lambda ns, replica: PROMPT_S_ENGINE
    before = sent.attempts[NS]
    # a re-test in place (only a budget changes): the serving replicas are measured at once
    plane.kubectl(
        "patch",
        "workflowrun",
        NAME,
        "-n",
        NS,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"canary": {"smokeTest": {"tpotBudgetMs": 600}}}}),
    )
    live.wait_for(lambda: sent.attempts[NS] > before or None, 120, "the smoke test's prompts")
    first = sent.last_attempt[NS]
    deleted = time.monotonic()
    plane.kubectl("delete", "workflowrun", NAME, "-n", NS, "--wait=false")
    # past the bound, and past the start of the third round a test that went on would send
    time.sleep(max(first + 2 * PROMPT_S + 3, deleted + DELETE_BOUND_S + 2) - time.monotonic())
    last = sent.last_attempt[NS]
    print(
        f"\ndelete: the last prompt reached the routes {last - deleted:.1f} s after the delete "
        f"({sent.attempts[NS] - before} of 10 sent)",
        flush=True,
    )
    assert last - deleted <= DELETE_BOUND_S, (
        f"a prompt {last - deleted:.1f} s after the delete; {sent.attempts[NS] - before} sent"
    )
    assert sent.attempts[NS] - before < 10  # it never finished: its 10 prompts take 3 rounds
    sent.policy = _real_engine

    def gone() -> bool:
        left = [
            *plane.mgmt.list(*WR, namespace=NS),
            *plane.mgmt.list(*MD, namespace=NS),
            *plane.mgmt.list(*MS, namespace=NS),
            *plane.mgmt.list(*MR, namespace=NS),
            *plane.mgmt.list(*ME, namespace=NS),
            *plane.mgmt.list("kubernetes.m.crossplane.io/v1alpha1", "Object", namespace=NS),
            *plane.mgmt.list("gateway.networking.k8s.io/v1", "HTTPRoute", namespace=NS),
            *workload.list("apps/v1", "Deployment", namespace=NS),
            *workload.list("resource.k8s.io/v1", "ResourceClaimTemplate", namespace=NS),
            *workload.list("gateway.networking.k8s.io/v1", "HTTPRoute", namespace=NS),
        ]
        return not left or None

    live.wait_for(gone, 180, "everything the WorkflowRun composed to be deleted")
    services = [
        s["metadata"]["name"]
        for s in plane.mgmt.list("v1", "Service", namespace=NS)
        if s["metadata"]["name"] != "kubernetes"
    ]
    assert services == []
