"""Restarts and a damaged ledger under a serving fleet: nothing lost, nothing duplicated, no pool
over-committed.

One fleet serves for the whole module: a WorkflowRun (the seed's, in a namespace of its own) and
two ModelDeployments on InferenceCluster lab-h100. Each scenario breaks one piece, repairs or
restarts it, and waits (bounded) until the fleet has converged again; the time to converge is
printed. What is compared, before and after, is read back from the live API servers: the
ModelReplicas (uid) and their binding annotations, the cluster's ledger (both copies: every
replica once, each with its uid, nothing past a node's devices), and on the workload cluster
every Deployment, ResourceClaimTemplate and pod of the namespace (uid), which must be exactly
what the replicas composed. Each scenario leaves the fleet serving for the next:

- d: the published ledger ConfigMap overwritten with bad JSON, then repaired as
  docs/reconciler.md says (the damaged copy deleted, the binder rebuilds it);
- c: the binder exits between its ledger write and its annotation writes (its test-only crash
  hook, docs/reconciler.md) and is started again;
- b: provider-kubernetes killed while a replica is added, and started again;
- a: the control plane's kube-apiserver and etcd stopped and started on the same data directory.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from plnt import labels
from plnt.capacity import binding, fleet_view, ledger, ledger_parse
from plnt_reconciler import binder
from tests.e2e import engines, fleet, live
from tests.e2e.stack import REPO, ControlPlane

NS = "restarts"
WR = ("plnt.work/v1", "WorkflowRun")
MD = ("modelplane.ai/v1alpha1", "ModelDeployment")
MR = ("modelplane.ai/v1alpha1", "ModelReplica")
OBJECT = ("kubernetes.m.crossplane.io/v1alpha1", "Object")
IC = ("modelplane.ai/v1alpha1", "InferenceCluster")
RUN = "llama"
DEPLOYMENTS = ("qwen-a", "qwen-b")
LEDGER_NS = "plnt-system"
PUBLISHED = ledger.ledger_name(fleet.CLUSTER)
RECORD = binder.record_name(fleet.CLUSTER)
DEVICES_PER_NODE = 8  # an nvidia-h100-8x node
# Proving that something is NOT deleted takes a window: once every replica has reported that it
# cannot read its ledger (the reconcile that, taking it for empty, would have dropped its
# composed resources), the workload is watched this much longer, enough for provider-kubernetes
# (its poll is 5 s) and the workload's garbage collector to carry out a deletion.
HOLD_S = 30


# --- what the module serves -------------------------------------------------------------------


def _workflow_run() -> dict[str, Any]:
    seed = yaml.safe_load((REPO / "examples" / "workflowrun-llama-70b" / "xr.yaml").read_text())
    seed["metadata"] = {"name": RUN, "namespace": NS}
    return seed


def _deployment(name: str, replicas: int = 1) -> dict[str, Any]:
    md = yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
    md = copy.deepcopy(md)
    md["metadata"] = {"name": name, "namespace": NS}
    md["spec"]["replicas"] = replicas
    return md


@dataclasses.dataclass(frozen=True)
class Fleet:
    """The namespace's serving state, read back from the API servers."""

    replicas: dict[str, str]  # ModelReplica name -> uid
    deployment_of: dict[str, str]  # ModelReplica name -> its ModelDeployment
    bindings: dict[str, str]  # ModelReplica name -> its plnt.work/binding annotation
    entries: dict[str, str]  # ledger key of the namespace -> uid
    sequence: int  # the ledger's
    workload: dict[tuple[str, str], str]  # (kind, name) on the workload cluster -> uid
    composed: set[tuple[str, str]]  # (kind, name) the replicas' Objects compose there
    endpoints: dict[str, str]  # ModelReplica name -> its endpoint on the cluster Gateway


WORKLOAD_KINDS = {
    "Deployment": "apps/v1",
    "ResourceClaimTemplate": "resource.k8s.io/v1",
    "Pod": "v1",
}


def _ledger_copies(plane: ControlPlane) -> tuple[ledger.Ledger, ledger.Ledger]:
    """The published ledger and the binder's record, each read by plnt.capacity.ledger_parse."""
    out = []
    for name in (PUBLISHED, RECORD):
        cm = plane.mgmt.get("v1", "ConfigMap", name, LEDGER_NS) or {}
        text = (cm.get("data") or {}).get(ledger.LEDGER_DATA_KEY)
        out.append(ledger_parse.parse_cluster_ledger(text, fleet.CLUSTER, f"{LEDGER_NS}/{name}"))
    return out[0], out[1]


def read_workload(plane: ControlPlane) -> dict[tuple[str, str], str]:
    """Every Deployment, ResourceClaimTemplate and pod of the namespace on the workload
    cluster (not being deleted), by kind and name: its uid."""
    workload = plane.workloads[fleet.CLUSTER]
    return {
        (kind, o["metadata"]["name"]): o["metadata"]["uid"]
        for kind, version in WORKLOAD_KINDS.items()
        for o in workload.list(version, kind, namespace=NS)
        if not o["metadata"].get("deletionTimestamp")
    }


def read_fleet(plane: ControlPlane) -> Fleet:
    replicas = plane.mgmt.list(*MR, namespace=NS)
    published, _ = _ledger_copies(plane)
    composed = set()
    for obj in plane.mgmt.list(*OBJECT, namespace=NS):
        owners = obj["metadata"].get("ownerReferences") or []
        if not any(o.get("controller") and o.get("kind") == "ModelReplica" for o in owners):
            continue
        manifest = ((obj.get("spec") or {}).get("forProvider") or {}).get("manifest") or {}
        if manifest.get("kind") in WORKLOAD_KINDS:
            composed.add((manifest["kind"], manifest["metadata"]["name"]))
    return Fleet(
        replicas={r["metadata"]["name"]: r["metadata"]["uid"] for r in replicas},
        deployment_of={
            r["metadata"]["name"]: r["metadata"]["labels"][labels.DEPLOYMENT] for r in replicas
        },
        bindings={
            r["metadata"]["name"]: (r["metadata"].get("annotations") or {}).get(binding.BINDING, "")
            for r in replicas
        },
        entries={
            key.split("/", 1)[1]: entry.uid
            for key, entry in published.entries.items()
            if key.startswith(f"{NS}/")
        },
        sequence=published.sequence,
        workload=read_workload(plane),
        composed=composed,
        endpoints={
            r["metadata"]["name"]: (r.get("status") or {}).get("endpoint") or "" for r in replicas
        },
    )


def _serving(plane: ControlPlane, expected: dict[str, int]) -> Fleet | str:
    """The fleet once it serves exactly ``expected`` replicas per ModelDeployment (the
    WorkflowRun's by its name), every one bound by the ledger and serving, else what is not
    yet so."""
    run = plane.mgmt.get(*WR, RUN, NS) or {}
    phase = (run.get("status") or {}).get("phase")
    if phase != "Ready":
        return f"WorkflowRun {RUN} is {phase}"
    for name in expected:
        if not live.is_true(plane.mgmt.get(*MD, name, NS), "ReplicasBound"):
            return f"ModelDeployment {name} is not ReplicasBound"
    try:
        state = read_fleet(plane)
    except ledger_parse.UnreadableLedgerError as err:
        return f"a ledger is unreadable: {err}"
    counts: dict[str, int] = {}
    for owner in state.deployment_of.values():
        counts[owner] = counts.get(owner, 0) + 1
    if counts != expected:
        return f"replicas per deployment {counts}"
    for replica in plane.mgmt.list(*MR, namespace=NS):
        name = replica["metadata"]["name"]
        if binding.state_of(replica).state != binding.BOUND:
            return f"ModelReplica {name} is {binding.state_of(replica).state}"
        if not (live.is_true(replica, "Bound") and live.is_true(replica, "Ready")):
            return f"ModelReplica {name} is not Bound and Ready"
    if set(state.entries) != set(state.replicas) or not state.composed:
        return f"ledger entries {sorted(state.entries)}, replicas {sorted(state.replicas)}"
    # every composed workload object exists, and every pod serves
    missing = state.composed - {k for k in state.workload if k[0] != "Pod"}
    if missing:
        return f"composed but not on the workload cluster: {sorted(missing)}"
    workload = plane.workloads[fleet.CLUSTER]
    pods = workload.list("v1", "Pod", namespace=NS)
    unready = [p["metadata"]["name"] for p in pods if not live.is_true(p, "Ready")]
    if not pods or unready:
        return f"pods not Ready: {unready or 'none yet'}"
    if not all(state.endpoints.values()):
        return f"endpoints {state.endpoints}"
    return state


def wait_serving(plane: ControlPlane, expected: dict[str, int], seconds: float) -> Fleet:
    last: list[Any] = []

    def check() -> Fleet | None:
        try:
            found = _serving(plane, expected)
        except (httpx.HTTPError, RuntimeError) as err:  # the API server is coming back
            last[:] = [err]
            return None
        if isinstance(found, str):
            last[:] = [found]
            return None
        return found

    try:
        return live.wait_for(check, seconds, f"the fleet serving {expected}", interval=1)
    except TimeoutError as err:
        raise TimeoutError(f"{err}; not yet: {last}") from None


def assert_intact(plane: ControlPlane, state: Fleet) -> None:
    """Nothing duplicated, nothing orphaned and no over-commit, in what is read back."""
    # every replica in the ledger once, with its own uid; the binding annotations say so too
    assert state.entries == state.replicas, (state.entries, state.replicas)
    published, record_copy = _ledger_copies(plane)
    assert published == record_copy, "the two ledger copies differ"
    for name, raw in state.bindings.items():
        record = binding.BindingRecord.model_validate_json(raw)
        entry = published.entries[f"{NS}/{name}"]
        assert (record.cluster, record.uid, record.digest, record.ledger) == (
            fleet.CLUSTER,
            state.replicas[name],
            entry.digest,
            entry.sequence,
        ), (name, record, entry)
    # the workload holds exactly what the replicas compose: no Deployment or claim template
    # left behind by a replica that went, none made twice
    kinds = {"Deployment", "ResourceClaimTemplate"}
    assert {k for k in state.workload if k[0] in kinds} == state.composed, (
        sorted(state.workload),
        sorted(state.composed),
    )
    # no node of the pool holds more devices than it has, counting every entry of the ledger
    cluster = plane.mgmt.get(*IC, fleet.CLUSTER)
    nodes = next(p["nodeCount"] for p in cluster["spec"]["nodePools"] if p["name"] == "h100")
    per_node: dict[int, int] = {}
    for entry in published.entries.values():
        for pool, slots in entry.parsed_slots().items():
            assert pool == "h100", pool
            for slot in slots:
                assert 0 <= slot.node < nodes, slot
                devices = sum(v for k, v in slot.demand if k.startswith("device:"))
                per_node[slot.node] = per_node.get(slot.node, 0) + devices
    assert all(used <= DEVICES_PER_NODE for used in per_node.values()), per_node


def ask(endpoint: str) -> int:
    """One streamed chat completion through the cluster Gateway's data plane: its status."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    try:
        with httpx.stream(
            "POST", f"{endpoint}/v1/chat/completions", json=body, timeout=10
        ) as response:
            text = response.read().decode(errors="replace")
            return response.status_code if "[DONE]" in text else -response.status_code
    except httpx.HTTPError:
        return 0


def answered(state: Fleet) -> None:
    statuses = {name: ask(endpoint) for name, endpoint in state.endpoints.items()}
    assert set(statuses.values()) == {200}, statuses


def report(what: str, seconds: float, capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\n{what}: converged again in {seconds:.1f} s", flush=True)


@pytest.fixture(scope="module")
def serving(plane: ControlPlane) -> Iterator[dict[str, int]]:
    """The WorkflowRun and the two ModelDeployments, serving; deleted at the end. Yields the
    replicas expected per ModelDeployment (scenarios that add some update it)."""
    fleet.ensure(plane)
    engine_policy = plane.simulator.engines.policy
    plane.simulator.engines.policy = lambda namespace, replica: (
        engines.FAST if namespace == NS else engine_policy(namespace, replica)
    )
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        _workflow_run(),
        *(_deployment(name) for name in DEPLOYMENTS),
    ]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    expected = {RUN: 1, **dict.fromkeys(DEPLOYMENTS, 1)}
    try:
        wait_serving(plane, expected, 420)
        yield expected
    finally:
        fleet.delete_namespace(plane, NS)
        plane.simulator.engines.policy = engine_policy


def _events(plane: ControlPlane) -> dict[str, dict[str, Any]]:
    return {e["metadata"]["uid"]: e for e in live.events_for(plane.mgmt, "default", fleet.CLUSTER)}


def _unknown(replica: dict[str, Any]) -> bool:
    cond = live.condition(replica, "Bound")
    return cond.get("status") == "Unknown" and f"{LEDGER_NS}/{PUBLISHED}" in cond.get("message", "")


def test_d_a_corrupt_ledger_keeps_what_serves_and_binds_once_repaired(
    plane: ControlPlane, serving: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    before = wait_serving(plane, serving, 240)
    assert_intact(plane, before)
    answered(before)
    events_before = set(_events(plane))
    cm = plane.mgmt.get("v1", "ConfigMap", PUBLISHED, LEDGER_NS)
    text = cm["data"][ledger.LEDGER_DATA_KEY]
    cm["data"][ledger.LEDGER_DATA_KEY] = text[: len(text) // 2]  # a truncated write
    plane.mgmt.http.put(
        plane.mgmt.path("v1", "ConfigMap", PUBLISHED, LEDGER_NS), json=cm
    ).raise_for_status()

    def still_serving() -> None:
        """Every Deployment, claim template and pod as before, and every replica answering."""
        now = read_workload(plane)
        assert now == before.workload, (sorted(set(before.workload) ^ set(now)), now)
        answered(before)

    said: list[dict[str, Any]] = []

    def everyone_says_which() -> bool:
        still_serving()
        replicas = plane.mgmt.list(*MR, namespace=NS)
        warnings = [
            e
            for uid, e in _events(plane).items()
            if uid not in events_before
            and e.get("type") == "Warning"
            and f"{LEDGER_NS}/{PUBLISHED}" in e.get("message", "")
        ]
        said[:] = warnings
        return (
            bool(warnings)
            and len(replicas) == len(before.replicas)
            and all(map(_unknown, replicas))
        )

    live.wait_for(
        everyone_says_which,
        180,
        "the replicas and the InferenceCluster to name the ConfigMap",
        interval=1,
    )
    assert said[0]["reason"] == "LedgerCorrupt", said
    assert said[0]["involvedObject"]["kind"] == "InferenceCluster"
    # the fleet view offers nothing on the cluster, and says why
    views, _ = fleet_view.read(plane.mgmt.list("v1", "ConfigMap", namespace=fleet_view.NAMESPACE))
    assert PUBLISHED in views[fleet.CLUSTER].cluster.closed, views[fleet.CLUSTER]
    held_until = time.monotonic() + HOLD_S
    live.wait_for(
        lambda: still_serving() or time.monotonic() >= held_until,
        HOLD_S + 60,
        "the hold to pass with everything serving",
        interval=1,
    )
    for replica in plane.mgmt.list(*MR, namespace=NS):
        assert _unknown(replica), live.condition(replica, "Bound")

    # repaired as docs/reconciler.md says: the damaged copy deleted, rebuilt from the record
    repaired = time.monotonic()
    plane.mgmt.delete("v1", "ConfigMap", PUBLISHED, LEDGER_NS)
    after = wait_serving(plane, serving, 240)
    report("a corrupt published ledger, repaired", time.monotonic() - repaired, capsys)
    # the same replicas, bindings, ledger entries and workload (the rebuilt copy may be written
    # at a later sequence)
    assert dataclasses.replace(after, sequence=before.sequence) == before
    assert_intact(plane, after)
    answered(after)

    # the next ModelDeployment binds
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(_deployment("qwen-c")))
    serving["qwen-c"] = 1
    grown = wait_serving(plane, serving, 240)
    assert_intact(plane, grown)
    assert {k: v for k, v in grown.replicas.items() if k in before.replicas} == before.replicas
    assert {k: grown.workload.get(k) for k in before.workload} == before.workload
    answered(grown)


def _scale(plane: ControlPlane, name: str, replicas: int) -> None:
    patch = json.dumps({"spec": {"replicas": replicas}})
    plane.kubectl("patch", "modeldeployment", name, "-n", NS, "--type=merge", "-p", patch)


def test_c_a_binder_dead_between_its_ledger_and_its_annotations_finishes_them(
    plane: ControlPlane, serving: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    before = wait_serving(plane, serving, 240)
    assert_intact(plane, before)
    # the binder again, with its test-only hook: it exits right after its next ledger write
    plane.procs.stop("plnt-binder")
    crashing = plane.procs.start(
        "plnt-binder",
        plane.binder_argv,
        env={**os.environ, "PYTHONUNBUFFERED": "1", binder.CRASH_AFTER_LEDGER_WRITE: "1"},
    )
    _scale(plane, DEPLOYMENTS[0], 2)
    live.wait_for(lambda: crashing.poll() is not None, 180, "the binder to exit after a commit")
    assert crashing.returncode == binder.CRASH_EXIT_CODE, plane.procs.tail("plnt-binder")
    # committed, not annotated: the new replica is in both ledger copies, and nothing else is
    published, record_copy = _ledger_copies(plane)
    assert published == record_copy
    replicas = {r["metadata"]["name"]: r for r in plane.mgmt.list(*MR, namespace=NS)}
    (new,) = set(replicas) - set(before.replicas)
    assert published.entries[f"{NS}/{new}"].uid == replicas[new]["metadata"]["uid"]
    assert binding.state_of(replicas[new]).state != binding.BOUND
    assert published.sequence == before.sequence + 1

    restarted = time.monotonic()
    plane.restart("plnt-binder")
    serving[DEPLOYMENTS[0]] = 2
    after = wait_serving(plane, serving, 240)
    report("a binder dead between its ledger and annotation writes", time.monotonic() - restarted,
           capsys)  # fmt: skip
    assert_intact(plane, after)
    # finished, not committed again: the entry is the one written before the crash
    published_after, _ = _ledger_copies(plane)
    assert published_after.entries[f"{NS}/{new}"] == published.entries[f"{NS}/{new}"]
    assert set(after.replicas) == set(before.replicas) | {new}
    assert {k: after.replicas[k] for k in before.replicas} == before.replicas
    assert {k: after.workload.get(k) for k in before.workload} == before.workload
    answered(after)


def test_b_provider_kubernetes_killed_while_a_replica_is_added(
    plane: ControlPlane, serving: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    before = wait_serving(plane, serving, 240)
    assert_intact(plane, before)
    plane.procs.stop("provider-kubernetes", kill=True)
    _scale(plane, DEPLOYMENTS[1], 2)
    # the new replica is bound and composed meanwhile; nothing reaches the workload cluster

    def composed_unapplied() -> bool:
        replicas = plane.mgmt.list(*MR, namespace=NS)
        new = [r for r in replicas if r["metadata"]["name"] not in before.replicas]
        return bool(new) and all(binding.state_of(r).state == binding.BOUND for r in new)

    live.wait_for(
        composed_unapplied, 180, "the new replica bound while provider-kubernetes is down"
    )
    assert read_workload(plane) == before.workload
    answered(before)
    restarted = time.monotonic()
    plane.procs.start("provider-kubernetes", plane.provider_argv, env=plane.provider_env)
    serving[DEPLOYMENTS[1]] = 2
    after = wait_serving(plane, serving, 300)
    report("provider-kubernetes killed and restarted", time.monotonic() - restarted, capsys)
    assert_intact(plane, after)
    assert len(set(after.replicas) - set(before.replicas)) == 1
    assert {k: after.replicas[k] for k in before.replicas} == before.replicas
    assert {k: after.bindings[k] for k in before.replicas} == before.bindings
    assert {k: after.workload.get(k) for k in before.workload} == before.workload
    answered(after)


def test_a_the_control_planes_api_server_and_etcd_restarted_on_their_data(
    plane: ControlPlane, serving: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    before = wait_serving(plane, serving, 240)
    assert_intact(plane, before)
    view_before, _ = fleet_view.read(
        plane.mgmt.list("v1", "ConfigMap", namespace=fleet_view.NAMESPACE)
    )
    plane.mgmt.stop()
    answered(before)  # the workload cluster's data plane does not need the control plane
    restarted = time.monotonic()
    plane.mgmt.start()
    after = wait_serving(plane, serving, 300)
    report("the control plane's kube-apiserver and etcd restarted", time.monotonic() - restarted,
           capsys)  # fmt: skip
    # ledgers, bindings and the fleet view survive as they were
    assert after == before
    assert_intact(plane, after)
    view_after, _ = fleet_view.read(
        plane.mgmt.list("v1", "ConfigMap", namespace=fleet_view.NAMESPACE)
    )
    assert view_after[fleet.CLUSTER] == view_before[fleet.CLUSTER]
    answered(after)
