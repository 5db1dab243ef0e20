"""A workload cluster's kube-apiserver stopped (SIGSTOP) under a serving fleet of two clusters
(docs/scheduler.md, "Failover"), on the live control plane:

- b, stopped for less than the grace period: the outage is reported (the InferenceCluster not
  Ready, `Reachable` False naming the timeout; the replica's endpoint out of the route;
  `ClustersHealthy` names the cluster) and, once it answers again, reported over; nothing
  moves: the same ModelReplicas, no replacement.
- a, stopped for longer than the grace period: a replacement is placed on the other cluster,
  bound and serving, and the degraded replica released while its cluster is still away; the
  WorkflowRun stays Ready throughout and says what failed over and where; resumed, the cluster's
  leftover (the released replica's workload) is removed. The test prints the seconds from the
  outage to each step, and the requests through the control-plane Gateway that failed.

The fleet: lab-h100 (tests/e2e/fleet.py) and a second cluster, failover-b, each with the
replicas spread one per cluster. failover-b's API server is the one stopped.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import yaml

from functions.model_deployment import replicas as rep
from functions.model_service import backends
from plnt import cluster_health
from plnt.capacity import binding
from tests.e2e import engines, fleet, live, workload
from tests.e2e.stack import REPO, ControlPlane

NS = "failover"
OTHER = "failover-b"  # the cluster whose API server is stopped
API = "modelplane.ai/v1alpha1"
WR = ("plnt.work/v1", "WorkflowRun")
MD = (API, "ModelDeployment")
MR = (API, "ModelReplica")
ME = (API, "ModelEndpoint")
IC = (API, "InferenceCluster")
HEALTH = cluster_health.ANNOTATION
HTTPROUTE = ("gateway.networking.k8s.io/v1", "HTTPRoute")
RUN = "llama"
STEADY = "steady"
GRACE_A = "15s"  # the run's: it fails over
GRACE_B = "10m"  # the steady deployment's: a short outage moves nothing
SIMULATED_START = workload.STAGING_SECONDS + workload.ENGINE_START_SECONDS


def _workflow_run() -> dict[str, Any]:
    seed = yaml.safe_load((REPO / "examples" / "workflowrun-llama-70b" / "xr.yaml").read_text())
    seed["metadata"] = {"name": RUN, "namespace": NS}
    seed["spec"]["replicas"] = {"min": 2, "max": 2}
    seed["spec"].pop("autoscaling", None)
    seed["spec"]["failover"] = {"after": GRACE_A}
    return seed


def _steady() -> dict[str, Any]:
    md = yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
    md = copy.deepcopy(md)
    md["metadata"] = {"name": STEADY, "namespace": NS}
    md["spec"]["replicas"] = 2
    md["spec"]["failover"] = {"after": GRACE_B}
    return md


def _replicas(plane: ControlPlane, owner: str | None) -> dict[str, dict[str, Any]]:
    """`owner`'s ModelReplicas by name (every one in the namespace for None)."""
    return {
        r["metadata"]["name"]: r
        for r in plane.mgmt.list(*MR, namespace=NS)
        if owner is None or r["metadata"]["labels"].get("modelplane.ai/deployment") == owner
    }


def _spread(plane: ControlPlane, owner: str) -> dict[str, str] | None:
    """Replica -> cluster once `owner` serves one replica on each cluster, every one bound
    and Ready with its endpoint Ready, else None."""
    found = _replicas(plane, owner)
    where = {n: r["spec"]["clusterName"] for n, r in found.items()}
    if sorted(where.values()) != sorted([fleet.CLUSTER, OTHER]):
        return None
    for name, replica in found.items():
        if binding.state_of(replica).state != binding.BOUND or not live.is_true(replica, "Ready"):
            return None
        if not live.is_true(plane.mgmt.get(*ME, name, NS), "Ready"):
            return None
    return where


def _routed(plane: ControlPlane, service: str) -> set[str]:
    """The replicas whose endpoint the service's HTTPRoute on the control plane sends to."""
    names = {
        ref.get("name")
        for route in plane.mgmt.list(*HTTPROUTE, namespace=NS)
        for rule in (route.get("spec") or {}).get("rules") or []
        for ref in rule.get("backendRefs") or []
    }
    candidates = {r["metadata"]["name"] for r in plane.mgmt.list(*MR, namespace=NS)}
    return {r for r in candidates if backends.backend_name(service, r) in names}


@pytest.fixture(scope="module")
def two_clusters(plane: ControlPlane) -> Iterator[None]:
    fleet.ensure(plane)
    if plane.mgmt.get(*IC, OTHER) is None:
        fleet.apply_existing_cluster(plane, OTHER, nodes=2)
    live.wait_ready(plane.mgmt, *IC, OTHER, seconds=240)
    fleet.wait_in_view(plane, OTHER)
    policy = plane.simulator.engines.policy
    plane.simulator.engines.policy = lambda namespace, replica: (
        engines.FAST if namespace == NS else policy(namespace, replica)
    )
    plane.kubectl(
        "apply", "-f", "-",
        stdin=yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )  # fmt: skip
    try:
        yield
    finally:
        # the fleet as it was, for the files that follow: lab-h100 alone, answering
        plane.pause_workload(OTHER, False)
        plane.simulator.engines.policy = policy
        try:
            fleet.delete_namespace(plane, NS, gone=120)
        finally:
            plane.kubectl("delete", "inferencecluster", OTHER, "--wait=false", check=False)
            fleet.wait_in_view(plane, OTHER, ready=False)


def _state(plane: ControlPlane) -> str:
    """The objects the test waits on, for a failure's message."""
    lines = []
    cluster = plane.mgmt.get(*IC, OTHER) or {}
    lines.append(
        f"{OTHER}: health {(cluster.get('metadata') or {}).get('annotations', {}).get(HEALTH)!r}; "
        f"conditions {_conditions(cluster)}"
    )
    for name, replica in sorted(_replicas(plane, None).items()):
        meta = replica["metadata"]
        endpoint = plane.mgmt.get(*ME, name, NS)
        lines.append(
            f"replica {name} on {replica['spec'].get('clusterName')}: "
            f"{binding.state_of(replica).state}, Ready {live.is_true(replica, 'Ready')}, "
            f"replaces {(meta.get('annotations') or {}).get(rep.REPLACES)!r}, "
            f"deleting {bool(meta.get('deletionTimestamp'))}, endpoint "
            f"{'none' if endpoint is None else live.is_true(endpoint, 'Ready')}"
        )
    for deployment in plane.mgmt.list(*MD, namespace=NS):
        lines.append(f"deployment {deployment['metadata']['name']}: {_conditions(deployment)}")
    for run in plane.mgmt.list(*WR, namespace=NS):
        phase = (run.get("status") or {}).get("phase")
        lines.append(f"run {run['metadata']['name']} {phase}: {_conditions(run)}")
    lines.append(f"routed ({RUN}): {sorted(_routed(plane, RUN))}")
    return "\n".join(lines)


def _conditions(obj: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
        for c in (obj.get("status") or {}).get("conditions") or []
    ]


def _wait(
    plane: ControlPlane, check: Callable[[], Any], seconds: float, what: str, interval: float = 0.5
) -> Any:
    """live.wait_for, failing with the state of what the test waits on."""
    try:
        return live.wait_for(check, seconds, what, interval)
    except TimeoutError as e:
        raise TimeoutError(f"{e}\n{_state(plane)}") from None


class Requests:
    """Chat completions through the control-plane Gateway to a URL, one every 0.25 s, on a
    thread of its own: how many were sent and, for each that failed, when it was sent (its
    time.monotonic()), how long it took, what came back, and the replicas whose engine
    the workload gateways forwarded it to (`forwarded` counts them)."""

    def __init__(
        self, url: str, forwarded: Callable[[], dict[str, int]], data_plane: Callable[[], str]
    ) -> None:
        self.url = url
        self.sent = 0
        self.forwarded = forwarded
        self.data_plane = data_plane  # what the control-plane Gateway routed by, on a failure
        self.failed: list[tuple[float, float, str, list[str], str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            before = self.forwarded()
            at = time.monotonic()
            outcome = _answer(self.url)
            took = time.monotonic() - at
            self.sent += 1
            if outcome != "200":
                after = self.forwarded()
                to = sorted(r for r, n in after.items() if n > before.get(r, 0))
                self.failed.append((at, took, outcome, to, self.data_plane()))
            self._stop.wait(0.25)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


def _answer(url: str) -> str:
    """One streamed chat completion through the control-plane Gateway: its status, or why it
    got none."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    try:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=10) as r:
            text = r.read().decode(errors="replace")
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}"
    return str(r.status_code) if "[DONE]" in text else f"{r.status_code} {text[:200]!r}"


def _forwarded(plane: ControlPlane) -> dict[str, int]:
    """Chat completions the workload gateways forwarded to each replica's engine in NS."""
    counts = plane.simulator.engines.requests
    return {replica: n for (namespace, replica), n in list(counts.items()) if namespace == NS}


def _data_plane(plane: ControlPlane) -> str:
    """What the control-plane Gateway's stand-in routes by, for a failure's message."""
    engines = plane.simulator.engines
    routes = [
        (r["metadata"].get("namespace"), r["metadata"]["name"], (r.get("spec") or {}).get("rules"))
        for r in engines.routes.get(plane.mgmt.name, [])
        if r["metadata"].get("namespace") == NS
    ]
    backends = {k: v for k, v in engines.backends.get(plane.mgmt.name, {}).items() if k[0] == NS}
    lag = time.monotonic()
    try:
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), engines.loop).result(5)
        answers = f"answers in {time.monotonic() - lag:.3f} s"
    except TimeoutError:
        answers = "does not answer within 5 s"
    return (
        f"routes {routes}; backends {backends}; gateways {plane.simulator.gateway_addresses}; "
        f"the data plane's loop {answers}; simulator passes {plane.simulator.passes}"
    )


def _cluster_down(plane: ControlPlane) -> bool:
    cluster = plane.mgmt.get(*IC, OTHER)
    reachable = live.condition(cluster, "Reachable")
    return not live.is_true(cluster, "Ready") and reachable.get("reason") == "TimedOut"


def _cluster_up(plane: ControlPlane) -> bool:
    cluster = plane.mgmt.get(*IC, OTHER)
    return live.is_true(cluster, "Ready") and live.is_true(cluster, "Reachable")


# Setup and teardown count (pytest-timeout): run first, b's setup starts the shared stack and a
# second cluster; a's teardown deletes the namespace and the cluster (the replicas' workloads on
# it first).
@pytest.mark.timeout(1500)
def test_b_a_short_outage_is_reported_and_moves_nothing(
    plane: ControlPlane, two_clusters: None, capsys: pytest.CaptureFixture[str]
) -> None:
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(_steady()))
    before = _wait(plane, lambda: _spread(plane, STEADY), 420, "steady spread over both")
    uids = {n: r["metadata"]["uid"] for n, r in _replicas(plane, STEADY).items()}
    degraded = next(n for n, c in before.items() if c == OTHER)
    timeline = live.Timeline(plane.pause_workload(OTHER, True))
    try:
        _wait(plane, lambda: _cluster_down(plane), 120, f"{OTHER} reported not Ready")
        timeline.mark("not Ready reported", True)

        def out_of_routes() -> bool:
            return plane.mgmt.get(*ME, degraded, NS) is None

        _wait(plane, out_of_routes, 60, f"the endpoint of {degraded} removed")
        timeline.mark("endpoint removed", True)
        health = live.condition(plane.mgmt.get(*MD, STEADY, NS), "ClustersHealthy")
        assert (health.get("status"), health.get("reason")) == ("False", "ClusterDegraded")
        assert f"{degraded} on {OTHER} (TimedOut: API server not answering" in health["message"]
        assert "fails over in" in health["message"]
    finally:
        plane.pause_workload(OTHER, False)
    resumed = time.monotonic() - timeline.start
    _wait(plane, lambda: _cluster_up(plane), 120, f"{OTHER} Ready again")
    timeline.mark("Ready again", True)
    _wait(plane, lambda: plane.mgmt.get(*ME, degraded, NS) is not None, 120, "endpoint back")
    timeline.mark("endpoint back", True)
    after = _wait(plane, lambda: _spread(plane, STEADY), 120, "steady serving as before")
    assert after == before
    assert {n: r["metadata"]["uid"] for n, r in _replicas(plane, STEADY).items()} == uids
    assert not any(
        rep.REPLACES in (r["metadata"].get("annotations") or {})
        for r in _replicas(plane, STEADY).values()
    )
    with capsys.disabled():
        print(f"\nb: {OTHER}'s API server stopped {resumed:.1f} s (grace {GRACE_B}):")
        for step in ("not Ready reported", "endpoint removed", "Ready again", "endpoint back"):
            print(timeline.line(step))
    plane.kubectl("delete", "-n", NS, "modeldeployment", STEADY, "--wait=false")
    _wait(plane, lambda: not _replicas(plane, STEADY), 240, "steady's replicas deleted")


@pytest.mark.timeout(1200)
def test_a_a_long_outage_fails_over_and_the_surplus_goes_when_it_returns(
    plane: ControlPlane, two_clusters: None, capsys: pytest.CaptureFixture[str]
) -> None:
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(_workflow_run()))
    _wait(
        plane,
        lambda: (plane.mgmt.get(*WR, RUN, NS) or {}).get("status", {}).get("phase") == "Ready",
        600,
        "the run Ready",
    )
    before = _wait(plane, lambda: _spread(plane, RUN), 300, "the run spread over both")
    degraded = next(n for n, c in before.items() if c == OTHER)
    healthy = next(n for n, c in before.items() if c != OTHER)
    url = plane.mgmt.get(*WR, RUN, NS)["status"]["url"]  # through the Gateway, from outside
    # the data plane reads the control plane's routes and backends every half second
    answers = [_answer(url)]
    deadline = time.monotonic() + 60
    while answers[-1] != "200" and time.monotonic() < deadline:
        time.sleep(0.5)
        answers.append(_answer(url))
    assert answers[-1] == "200", f"{url}: {answers[-3:]}; {_data_plane(plane)}"
    with capsys.disabled():
        print(f"\nbefore the outage, {url} answered: {answers}")
    requests = Requests(url, lambda: _forwarded(plane), lambda: _data_plane(plane))
    not_ready_run: list[str] = []
    said: set[str] = set()  # the run's ClustersHealthy messages
    timeline = live.Timeline(plane.pause_workload(OTHER, True))
    replacement = ""
    try:

        def look() -> bool:
            nonlocal replacement
            run = plane.mgmt.get(*WR, RUN, NS) or {}
            if (run.get("status") or {}).get("phase") != "Ready" or not live.is_true(run, "Ready"):
                not_ready_run.append(str((run.get("status") or {}).get("phase")))
            said.add(live.condition(run, "ClustersHealthy").get("message", ""))
            timeline.mark("not Ready reported", _cluster_down(plane))
            timeline.mark("endpoint out of the route", degraded not in _routed(plane, RUN))
            found = _replicas(plane, RUN)
            for name, replica in found.items():
                if (replica["metadata"].get("annotations") or {}).get(rep.REPLACES) == degraded:
                    replacement = name
            if replacement and replacement in found:
                new = found[replacement]
                timeline.mark("replacement bound", binding.state_of(new).state == binding.BOUND)
                timeline.mark(
                    "replacement serving",
                    live.is_true(new, "Ready") and replacement in _routed(plane, RUN),
                )
            # released: deleted, which finishes only once its cluster answers again (its
            # composed resources there are deleted first)
            gone = degraded not in found or bool(
                found[degraded]["metadata"].get("deletionTimestamp")
            )
            timeline.mark("degraded replica released", gone)
            return "replacement serving" in timeline.seen and gone

        _wait(plane, look, 300, "a replacement serving and the degraded replica released", 0.5)
        where = plane.mgmt.get(*MR, replacement, NS)["spec"]["clusterName"]
    finally:
        plane.pause_workload(OTHER, False)
    resumed = time.monotonic() - timeline.start
    requests.stop()
    assert where == fleet.CLUSTER, where
    # the run stayed Ready throughout and said what failed over and where
    assert not not_ready_run, not_ready_run
    failing = f"{degraded} on {OTHER} (TimedOut: API server not answering"
    assert any(failing in m and f"failing over to {replacement} on {where}" in m for m in said), (
        said
    )
    # resumed: the cluster reports Ready; the released replica's workload there is removed
    _wait(plane, lambda: _cluster_up(plane), 120, f"{OTHER} Ready again")
    timeline.mark("Ready again", True)
    other = plane.workloads[OTHER]

    def leftover_gone() -> bool:
        return not [
            d
            for d in other.list("apps/v1", "Deployment", namespace=NS)
            if degraded in d["metadata"]["name"] and not d["metadata"].get("deletionTimestamp")
        ]

    _wait(plane, leftover_gone, 300, f"{degraded}'s workload removed from {OTHER}")
    _wait(
        plane,
        lambda: set(_replicas(plane, RUN)) == {healthy, replacement},
        120,
        f"{degraded} deleted",
    )
    timeline.mark("surplus retired on the returned cluster", True)
    with capsys.disabled():
        print(f"\na: {OTHER}'s API server stopped {resumed:.1f} s (grace {GRACE_A}):")
        for step in (
            "not Ready reported",
            "endpoint out of the route",
            "replacement bound",
            "replacement serving",
            "degraded replica released",
            "Ready again",
            "surplus retired on the returned cluster",
        ):
            print(timeline.line(step))
        print(f"  (replacement serving includes {SIMULATED_START:.0f} s of simulated weight "
              "staging and engine start)")  # fmt: skip
        print(f"  requests through the control-plane Gateway: {requests.sent} sent, "
              f"{len(requests.failed)} failed")  # fmt: skip
        for sent, took, outcome, to, _ in requests.failed:
            at = sent - timeline.start
            print(f"    sent at {at:6.1f} s, {took:4.1f} s: {outcome} (forwarded to {to})")
        if requests.failed:
            print(f"  the first failure's data plane: {requests.failed[0][4]}")
    assert set(_replicas(plane, RUN)) == {healthy, replacement}
    after = _answer(url)
    assert after == "200", f"{url}: {after}; {_data_plane(plane)}\n{_state(plane)}"
