"""A model of the binding protocol, explored over every interleaving of its steps.

Actors take one API call per step against a modelled API server (objects with uids and
resourceVersions; a ConfigMap write with a stale resourceVersion is refused, as the real one
refuses it):

- a proposer is one ModelDeployment's reconciles: it lists the fleet's ModelReplicas (its own
  snapshot), runs the real scheduler (`functions.model_deployment.scheduler`) and the real
  ModelReplica builder on it, then applies each replica it wants and deletes each it releases,
  one call each (as Crossplane applies composed resources). It runs more than once, so a
  refused replica is released and placed again;
- a binder is `plnt.reconcile.binder`'s pass, step by step: read the ledger, list the replicas,
  decide (`plnt.reconcile.ledger.decide`, the real code), write the ledger with the version
  read, annotate each replica (one call each, with the uid precondition);
- a restart throws a binder's or a proposer's memory away between any two steps.

After every step, the replicas that are *bound* (`plnt.binding.verify` on the ledgers as the API
server holds them, what the ModelReplica function renders on) must fit their pool: counted
independently (devices and whole nodes per pool) and packed slot by slot; with an InferenceQuota,
the bound replicas of the namespaces it covers hold no more GPUs than its hard limit; with a
fenced cluster, no replica of a namespace it does not admit is bound on it. Each deployment has
a namespace of its own name (labelled team=<name>). The search is exhaustive (depth first over
distinct states) for the small cases.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from functions.model_deployment import replicas as rep
from functions.model_deployment import scheduler
from plnt import binding, capacity, tenancy
from plnt.fleet import cluster_of
from plnt.reconcile import ledger
from tests.scheduler.fleet import StubCel, cluster, engine, klass, member, view

CLASSES = [klass("h100")]  # 8 GPUs per node


@dataclasses.dataclass(frozen=True)
class Case:
    nodes: int  # of the one pool `h` on cluster `a`
    deployments: tuple[tuple[str, int, int], ...]  # (name, GPUs per replica, replicas)
    binders: int = 1
    binder_passes: int = 2
    proposer_runs: int = 2
    restarts: int = 1  # restarts allowed in a run (binder or proposer)
    gang: bool = False  # the first deployment is a Leader/Worker gang (whole nodes)
    clusters: int = 1  # x0, x1, ...: each with the pool `h`; a replica refused on one moves
    quota: tuple[tuple[str, ...], int] | None = None  # (namespaces it covers, hard GPUs)
    fence: tuple[str, ...] | None = None  # the namespaces x0 admits (None: every one)


QUOTA = "q"


def namespaces(case: Case) -> dict[str, dict[str, str]]:
    return {name: {"team": name} for name, _, _ in case.deployments}


def quotas(case: Case) -> list[dict]:
    if case.quota is None:
        return []
    covered, hard = case.quota
    return [
        {
            "metadata": {"name": QUOTA},
            "spec": {
                "namespaceSelector": {
                    "matchExpressions": [{"key": "team", "operator": "In", "values": list(covered)}]
                },
                "hard": {"devices": {"gpu.nvidia.com": hard}},
            },
        }
    ]


# --- the modelled API server --------------------------------------------------------------------


def fresh_api() -> dict[str, Any]:
    return {"replicas": {}, "ledgers": {}, "uid": 0}  # cluster: [resourceVersion, json]


def api_list(api: dict) -> list[dict]:
    return [copy.deepcopy(o) for _, o in sorted(api["replicas"].items())]


def api_apply(api: dict, obj: dict) -> None:
    """Server-side apply by the composer: spec and its own annotation; the binder's stay."""
    key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
    seen = api["replicas"].get(key)
    new = copy.deepcopy(obj)
    if seen is None:
        api["uid"] += 1
        new["metadata"]["uid"] = f"u{api['uid']}"
        new["metadata"]["creationTimestamp"] = f"{api['uid']:04d}"
    else:
        new["metadata"]["uid"] = seen["metadata"]["uid"]
        new["metadata"]["creationTimestamp"] = seen["metadata"]["creationTimestamp"]
        mine = new["metadata"].setdefault("annotations", {})
        for k, v in (seen["metadata"].get("annotations") or {}).items():
            if k not in mine:
                mine[k] = v
    api["replicas"][key] = new


def api_annotate(api: dict, key: str, uid: str, writes: dict) -> None:
    seen = api["replicas"].get(key)
    if seen is None or seen["metadata"]["uid"] != uid:  # gone or re-created: refused
        return
    annotations = seen["metadata"].setdefault("annotations", {})
    for k, v in writes.items():
        if v is None:
            annotations.pop(k, None)
        else:
            annotations[k] = v


def api_write_ledger(api: dict, cluster: str, read_version: int | None, body: str) -> bool:
    current = api["ledgers"].get(cluster)
    if (current[0] if current else None) != read_version:
        return False  # 409: stale resourceVersion (or AlreadyExists)
    api["ledgers"][cluster] = [(current[0] if current else 0) + 1, body]
    return True


# --- actors ---------------------------------------------------------------------------------------


def fleet(case: Case) -> list[dict]:
    out = [cluster(f"x{i}", [("h", "h100", case.nodes)]) for i in range(case.clusters)]
    if case.fence is not None:
        out[0].setdefault("spec", {})["namespaceSelector"] = {
            "matchExpressions": [{"key": "team", "operator": "In", "values": list(case.fence)}]
        }
    return out


def spec_of(case: Case, index: int) -> dict:
    _, gpus, _ = case.deployments[index]
    if case.gang and index == 0:
        return {
            "engines": [
                engine("g", member("Leader", count=gpus), member("Worker", count=gpus, nodes=1))
            ]
        }
    return {"engines": [engine("llm", member(count=gpus))]}


def propose(case: Case, index: int, snapshot: list[dict]) -> list[tuple[str, Any]]:
    """One reconcile of deployment `index` on `snapshot`: the calls it makes, in order."""
    name, _, wanted = case.deployments[index]
    spec = spec_of(case, index)
    seen = [scheduler.placed_replica(o) for o in snapshot]
    own_objs = {
        o["metadata"]["name"]: o
        for o in snapshot
        if (o["metadata"].get("labels") or {}).get("modelplane.ai/deployment") == name
    }
    own = [r for r in seen if r.deployment == name]
    cel = StubCel()
    result = scheduler.schedule(
        view(spec["engines"]),
        replicas=wanted,
        cluster_selector=lambda labels: True,
        clusters=[cluster_of(c) for c in fleet(case)],
        classes=CLASSES,
        fleet=seen,
        own=own,
        evaluate=cel.evaluate,
        compile_check=cel.compile,
    )
    calls: list[tuple[str, Any]] = []
    for r in result.released:
        calls.append(("delete", f"{name}/{r.name}"))
    for r in result.kept:
        calls.append(("apply", rep.pinned_replica(own_objs[r.name])))
    for replica, placement in zip(
        rep.fresh_names(name, "r", own_objs, len(result.placed)), result.placed, strict=True
    ):
        obj = rep.model_replica(
            name=replica, namespace=name, deployment=name, revision="r", spec=spec,
            placement=placement,
        )  # fmt: skip
        calls.append(("apply", obj))
    return calls


def binder_decide(
    case: Case, reads: dict, listed: list[dict]
) -> tuple[dict[str, ledger.QuotaDecision], dict[str, ledger.Decision]]:
    """The binder's pass as plnt.reconcile.binder makes it: quotas first, then clusters."""
    views = [ledger.Replica.of(o) for o in listed]
    classes = {c["metadata"]["name"]: c for c in CLASSES}
    clusters = {c["metadata"]["name"]: c for c in fleet(case)}
    fenced = ledger.tenancy_refusals(views, clusters, namespaces(case))
    eligible = {v.key for v in views if v.cluster in clusters} - set(fenced)
    decided = {}
    for q in quotas(case):
        body = reads[f"quota:{QUOTA}"][1]
        held = (
            tenancy.QuotaLedger.model_validate_json(body) if body
            else tenancy.QuotaLedger(quota=QUOTA)
        )  # fmt: skip
        decided[QUOTA] = ledger.decide_quota(held, q, views, namespaces(case), eligible=eligible)
    refuse = {**ledger.quota_refusals(views, list(decided.values())), **fenced}
    out = {}
    for c in fleet(case):
        name = c["metadata"]["name"]
        body = reads[name][1]
        state = ledger.Ledger.model_validate_json(body) if body else ledger.Ledger(cluster=name)
        out[name] = ledger.decide(
            state,
            [v for v in views if v.cluster == name],
            ledger.pools_of(c, classes),
            alive={v.uid for v in views},
            refuse=refuse,
        )
    return decided, out


# Actor state (immutable, hashable through its JSON): kind, pc, data, runs done.


def initial(case: Case) -> dict:
    actors = [{"kind": "proposer", "i": i, "pc": "list", "calls": [], "runs": 0}
              for i in range(len(case.deployments))]  # fmt: skip
    actors += [{"kind": "binder", "pc": "read", "read": None, "decision": None, "runs": 0}
               for _ in range(case.binders)]  # fmt: skip
    return {"api": fresh_api(), "actors": actors, "restarts": 0}


def moves(case: Case, state: dict) -> list[tuple[int, str]]:
    out = []
    for n, a in enumerate(state["actors"]):
        limit = case.proposer_runs if a["kind"] == "proposer" else case.binder_passes
        if a["runs"] < limit:
            out.append((n, "step"))
            if state["restarts"] < case.restarts and a["pc"] not in ("list", "read"):
                out.append((n, "restart"))
    return out


def step(case: Case, state: dict, n: int, what: str) -> dict:
    state = copy.deepcopy(state)
    api, a = state["api"], state["actors"][n]
    if what == "restart":
        state["restarts"] += 1
        a.update({"pc": "list", "calls": []} if a["kind"] == "proposer" else
                 {"pc": "read", "read": None, "decision": None})  # fmt: skip
        return state
    if a["kind"] == "proposer":
        if a["pc"] == "list":
            a["calls"] = propose(case, a["i"], api_list(api))
            a["pc"] = "write"
            if a["calls"]:
                return state  # the list is a step of its own; the writes follow
        if a["calls"]:  # one call per step
            op, arg = a["calls"].pop(0)
            if op == "apply":
                api_apply(api, arg)
            else:
                api["replicas"].pop(arg, None)
        if not a["calls"]:
            a.update({"pc": "list", "runs": a["runs"] + 1})
        return state
    # binder
    if a["pc"] == "read":  # every ledger (one list call), before the replicas
        a["read"] = {
            name: list(api["ledgers"].get(name) or [None, ""]) for name in ledger_names(case)
        }
        a["pc"] = "list"
    elif a["pc"] == "list":
        listed = api_list(api)
        reserved, decisions = binder_decide(case, a["read"], listed)
        uids = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["uid"]
                for o in listed}  # fmt: skip
        a["decision"] = {
            "writes": [
                [f"quota:{name}", d.ledger.model_dump_json()]
                for name, d in sorted(reserved.items())
                if d.changed
            ]
            + [
                [name, d.ledger.model_dump_json()]
                for name, d in sorted(decisions.items())
                if d.changed
            ],
            "annotate": [
                [k, uids[k], w] for d in decisions.values() for k, w in sorted(d.annotate.items())
            ],
        }
        a["pc"] = "write"
    elif a["pc"] == "write":  # one ledger per step; a conflict starts the pass again
        d = a["decision"]
        if d["writes"]:
            name, body = d["writes"].pop(0)
            if not api_write_ledger(api, name, a["read"][name][0], body):
                a.update({"pc": "read", "decision": None})
                return state
        if not d["writes"]:
            a["pc"] = "annotate"
            if not d["annotate"]:
                a.update({"pc": "read", "runs": a["runs"] + 1, "decision": None})
    elif a["pc"] == "annotate":
        key, uid, writes = a["decision"]["annotate"].pop(0)
        api_annotate(api, key, uid, writes)
        if not a["decision"]["annotate"]:
            a.update({"pc": "read", "runs": a["runs"] + 1, "decision": None})
    return state


def ledger_names(case: Case) -> list[str]:
    return [c["metadata"]["name"] for c in fleet(case)] + [f"quota:{QUOTA}" for _ in quotas(case)]


# --- the invariant ----------------------------------------------------------------------------


def rendered(api: dict, obj: dict) -> binding.State:
    """What the ModelReplica function decides for `obj` on the ledgers the API server holds."""
    held = api["ledgers"].get(obj["spec"]["clusterName"])
    cluster_ledger = ledger.Ledger.model_validate_json(held[1]) if held else None
    quota_held = api["ledgers"].get(f"quota:{QUOTA}")
    quota_ledgers = [tenancy.QuotaLedger.model_validate_json(quota_held[1])] if quota_held else []
    return binding.verify(obj, cluster_ledger, quota_ledgers)


def check(case: Case, state: dict) -> list[str]:
    """Bound replicas fit their cluster's pool: independent counts, then slot by slot; they
    hold no more than the quota covering their namespaces; none is outside a fence."""
    problems = []
    api = state["api"]
    states = {k: rendered(api, o) for k, o in api["replicas"].items()}
    if case.quota is not None:
        covered, hard = case.quota
        held = sum(
            binding.devices_of(o).get("gpu.nvidia.com", 0)
            for k, o in api["replicas"].items()
            if o["metadata"]["namespace"] in covered and states[k].state == binding.BOUND
        )
        if held > hard:
            problems.append(f"quota: {held} GPUs bound in {covered} on a hard limit of {hard}")
    if case.fence is not None:
        problems += [
            f"x0: {k} bound outside its fence"
            for k, o in api["replicas"].items()
            if o["spec"]["clusterName"] == "x0"
            and o["metadata"]["namespace"] not in case.fence
            and states[k].state == binding.BOUND
        ]
    for c in fleet(case):
        name = c["metadata"]["name"]
        bound = [
            states[k]
            for k, obj in api["replicas"].items()
            if obj["spec"]["clusterName"] == name and states[k].state == binding.BOUND
        ]
        pods = [p for s in bound for ps in s.demand.values() for p in ps]
        gpus = sum(p.count * (8 if p.whole else dict(p.demand).get("device:gpu", 0)) for p in pods)
        whole = sum(p.count for p in pods if p.whole)
        if gpus > case.nodes * 8:
            problems.append(f"{name}: {gpus} GPUs bound on {case.nodes * 8}")
        if whole > case.nodes:
            problems.append(f"{name}: {whole} whole nodes bound on {case.nodes}")
        pool = capacity.Pool(case.nodes, capacity.Shape((("device:gpu", 8),)))
        for s in bound:
            over = pool.take((s.slots or {}).get("h", ()))
            if over:
                problems.append(f"{name}: slots {over} do not fit")
    return problems


def explore(case: Case, limit: int = 400_000) -> tuple[int, int, int]:
    """Every reachable state, depth first; returns (states, final states, most GPUs bound)."""
    seen: set[str] = set()
    stack = [initial(case)]
    finals = most = 0
    while stack:
        state = stack.pop()
        key = json.dumps(state, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        assert len(seen) <= limit, "state space larger than the test budget"
        problems = check(case, state)
        assert not problems, (problems, json.dumps(state["api"], indent=1, sort_keys=True))
        bound_gpus = sum(
            dict(p.demand).get("device:gpu", 0) * p.count
            for o in state["api"]["replicas"].values()
            for s in [rendered(state["api"], o)]
            if s.state == binding.BOUND
            for ps in s.demand.values()
            for p in ps
        )
        most = max(most, bound_gpus)
        next_moves = moves(case, state)
        if not next_moves:
            finals += 1
        for n, what in next_moves:
            stack.append(step(case, state, n, what))
    return len(seen), finals, most


CASES = {
    # Two deployments, each sure from its own snapshot that its 6-GPU replica fits the one node.
    "two reconciles race for one node": Case(nodes=1, deployments=(("a", 6, 1), ("b", 6, 1))),
    # Three 3-GPU replicas on one 8-GPU node: two fit, whichever order.
    "three reconciles, two fit": Case(
        nodes=1, deployments=(("a", 3, 1), ("b", 3, 1), ("c", 3, 1)), binder_passes=2,
        proposer_runs=1,
    ),
    # Two binders at once (a rolling update gone wrong): the ledger's compare-and-swap holds.
    "two binders": Case(
        nodes=1, deployments=(("a", 5, 1), ("b", 5, 1)), binders=2, binder_passes=1,
        proposer_runs=1,
    ),
    # A gang (two whole nodes) against a 1-GPU replica on a two-node pool.
    "gang against a small replica": Case(
        nodes=2, deployments=(("g", 8, 1), ("s", 1, 1)), gang=True, proposer_runs=1,
    ),
    # Two one-node clusters: both deployments pick x0 (the name breaks the tie), one is
    # refused, released and placed again on x1; never more than one 6-GPU replica per node.
    "a loser is placed again elsewhere": Case(
        nodes=1, deployments=(("a", 6, 1), ("b", 6, 1)), clusters=2, binder_passes=2,
        proposer_runs=2, restarts=0,
    ),
    # Tenancy. One quota of 4 GPUs over two namespaces, room for both 3-GPU replicas on the
    # pool: whichever binder or reconcile goes first, only one is ever bound.
    "two namespaces share a quota": Case(
        nodes=1, deployments=(("a", 3, 1), ("b", 3, 1)), quota=(("a", "b"), 4), proposer_runs=1,
    ),
    # The same with two binders at once on two clusters: each binder could commit one replica on
    # a cluster of its own; the one quota ledger lets only one reserve.
    "two binders, two clusters, one quota": Case(
        nodes=1, deployments=(("a", 3, 1), ("b", 3, 1)), quota=(("a", "b"), 4), binders=2,
        binder_passes=1, proposer_runs=1, clusters=2, restarts=0,
    ),
    # A namespace's own quota (2 replicas of 2 GPUs asked, 3 GPUs allowed), three actors racing.
    "a namespace over its own quota": Case(
        nodes=1, deployments=(("a", 2, 2), ("b", 2, 1)), quota=(("a",), 3), proposer_runs=1,
        binders=2, binder_passes=1, restarts=0,
    ),
    # x0 admits only namespace a; b's replica, placed on x0 first by its reconcile, is refused
    # there and ends on x1 (or nowhere), never bound on x0.
    "a fenced cluster": Case(
        nodes=1, deployments=(("a", 3, 1), ("b", 3, 1)), clusters=2, fence=("a",),
        proposer_runs=2, restarts=0,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_no_interleaving_over_commits(case: Case) -> None:
    states, finals, most = explore(case)
    assert finals > 0
    assert states > 50  # the search really interleaved
    assert most > 0  # and something got bound in some interleaving


def test_a_loser_ends_bound_on_the_other_cluster_in_some_interleaving() -> None:
    _, _, most = explore(CASES["a loser is placed again elsewhere"])
    assert most == 12  # both 6-GPU replicas bound at once: one per cluster


def test_the_invariant_catches_the_defect_of_issue_15() -> None:
    """Rendering every proposal (no binder: each reconcile trusts its own snapshot) over-commits
    in some interleaving the search finds: the invariant is not vacuous."""
    case = Case(nodes=1, deployments=(("a", 6, 1), ("b", 6, 1)), binders=0, proposer_runs=1,
                restarts=0)  # fmt: skip
    with trusting_every_proposal(), pytest.raises(AssertionError, match="x0: 12 GPUs bound on 8"):
        explore(case)


@contextlib.contextmanager
def trusting_every_proposal() -> Iterator[None]:
    """The renderer of issue 15: every proposal renders, whatever the ledgers hold."""
    real = binding.verify

    def trusting(obj: dict, *_: Any) -> binding.State:
        s = binding.state_of(obj)
        pool = capacity.Pool(8, capacity.Shape((("device:gpu", 8),)))
        slots = {k: tuple(pool.pack(v) or ()) for k, v in s.demand.items()}
        return dataclasses.replace(s, state=binding.BOUND, slots=slots)

    binding.verify = trusting
    try:
        yield
    finally:
        binding.verify = real


@contextlib.contextmanager
def ignoring_quota_ledgers() -> Iterator[None]:
    """A renderer that checks the cluster's ledger only (not the quota ledgers)."""
    real = binding.verify

    def cluster_only(obj: dict, held: Any, *_: Any) -> binding.State:
        return real(obj, held)

    binding.verify = cluster_only
    try:
        yield
    finally:
        binding.verify = real


@contextlib.contextmanager
def binder_ignoring_quotas() -> Iterator[None]:
    real = ledger.quota_refusals
    ledger.quota_refusals = lambda *_: {}  # type: ignore[assignment]
    try:
        yield
    finally:
        ledger.quota_refusals = real


def test_either_check_alone_holds_the_quota_and_neither_does_not() -> None:
    """The binder commits only reserved replicas, and the function renders only reserved ones:
    each alone keeps the quota in every interleaving; with neither, the search finds both
    replicas bound, 6 GPUs on a limit of 4 (the invariant is not vacuous)."""
    case = CASES["two namespaces share a quota"]
    with binder_ignoring_quotas():
        explore(case)
    with ignoring_quota_ledgers():
        explore(case)
    with (
        binder_ignoring_quotas(),
        ignoring_quota_ledgers(),
        pytest.raises(AssertionError, match="quota: 6 GPUs"),
    ):
        explore(case)


def test_the_fence_invariant_catches_a_binder_without_fences() -> None:
    case = CASES["a fenced cluster"]
    real = ledger.tenancy_refusals
    ledger.tenancy_refusals = lambda *_: {}  # type: ignore[assignment]
    try:
        with pytest.raises(AssertionError, match="bound outside its fence"):
            explore(case)
    finally:
        ledger.tenancy_refusals = real


def test_a_fenced_out_deployment_ends_on_the_other_cluster_in_some_interleaving() -> None:
    _, _, most = explore(CASES["a fenced cluster"])
    assert most == 6  # both bound: a on x0, b on x1
