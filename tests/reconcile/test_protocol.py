"""A model of the binding protocol, explored over every interleaving of its steps.

Actors take one API call per step against a modelled API server (objects with uids and
resourceVersions; a ConfigMap write with a stale resourceVersion is refused, as the real one
refuses it):

- a proposer is one ModelDeployment's reconciles: it lists the fleet's ModelReplicas (its own
  snapshot), runs the real scheduler (`plnt.capacity.scheduling`) and the real
  ModelReplica builder on it, then applies each replica it wants and deletes each it releases,
  one call each (as Crossplane applies composed resources). It runs more than once, so a
  refused replica is released and placed again;
- a binder is `plnt_reconciler.binder`'s pass, step by step: read the ledger, list the replicas,
  decide (`plnt.capacity.commit.decide`, the real code), write the ledger with the version
  read, annotate each replica (one call each, with the uid precondition);
- a restart throws a binder's or a proposer's memory away between any two steps.

After every step, the replicas that are *bound* (`plnt.capacity.binding.verify` on the ledgers as
the API server holds them, what the ModelReplica function renders on) must fit their pool: counted
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
from functions.model_replica import fn as model_replica_fn
from plnt import capacity
from plnt.capacity import binding, commit, ledger, ledger_parse, quotas, scheduling
from plnt.capacity.offer import cluster_of
from plnt_reconciler import binder
from tests.scheduler.fleet import StubCel, cluster, engine, klass, member, view
from tests.support import spec_asking

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
    # Once, at any point of the run, a ledger ConfigMap is damaged: (how, which copy, ledger),
    # how: "corrupt" (its JSON cut in half), "ahead" (its sequence moved past the record's) or
    # "delete"; which: "ledgers" (the published copy), "records" or "both" (deleted). Once
    # after that, at any point, an operator repairs it as docs/reconciler.md says: deletes the
    # damaged copy, or restores the published copy from a backup when both were deleted.
    damage: tuple[str, str, str] | None = None
    # A ModelReplica its tenant wrote by hand on x0 before anything else: (copies, GPUs per
    # copy), its `plnt.work/pool-demand` claiming one copy only.
    hand: tuple[int, int] | None = None


QUOTA = "q"
HAND = "hand/hand-0"


def hand_made(case: Case) -> dict:
    """The hand-made replica of `case.hand`: its spec asks copies x GPUs, its annotation less."""
    assert case.hand is not None
    copies, gpus = case.hand
    one = {"h": (capacity.Pods(1, (("device:gpu", gpus),)),)}
    return {
        "metadata": {
            "name": "hand-0",
            "namespace": "hand",
            "uid": "u0",
            "creationTimestamp": "0000",
            "annotations": {binding.DEMAND: capacity.demand_json(one)},
        },
        "spec": spec_asking("x0", {"h": (capacity.Pods(copies, (("device:gpu", gpus),)),)}),
    }


def namespaces(case: Case) -> dict[str, dict[str, str]]:
    return {name: {"team": name} for name, _, _ in case.deployments}


def quota_objects(case: Case) -> list[dict]:
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
    # ledgers: the published copies, records: the binder's own, by ledger name: [version, json];
    # view: the last sequence the binder counted per ledger (its fleet view, a quota's status)
    return {"replicas": {}, "ledgers": {}, "records": {}, "view": {}, "uid": 0, "rv": 0}


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


def api_write_ledger(
    api: dict, name: str, read_version: int | None, body: str, where: str = "ledgers"
) -> bool:
    """Create (no version) or replace at exactly `read_version`; False as the API server's 409
    (stale, AlreadyExists) or 404 (deleted since it was read)."""
    current = api[where].get(name)
    if (current[0] if current else None) != read_version:
        return False
    api["rv"] += 1
    api[where][name] = [api["rv"], body]
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
    seen = [scheduling.placed_replica(o) for o in snapshot]
    own_objs = {
        o["metadata"]["name"]: o
        for o in snapshot
        if (o["metadata"].get("labels") or {}).get("modelplane.ai/deployment") == name
    }
    own = [r for r in seen if r.deployment == name]
    cel = StubCel()
    result = scheduling.schedule(
        scheduling.Ask(view(spec["engines"]), wanted, lambda labels: True),
        scheduling.FleetState([cluster_of(c) for c in fleet(case)], CLASSES, seen),
        scheduling.Owner(own=own),
        scheduling.Cel(cel.evaluate, cel.compile),
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


def configmap(name: str, where: str, body: str) -> dict:
    """Ledger `name`'s published copy (`where` "ledgers") or record ("records") as a ConfigMap."""
    published = where == "ledgers"
    if name.startswith("quota:"):
        quota = name.split(":", 1)[1]
        cm_name = quotas.quota_ledger_name(quota) if published else binder.quota_record_name(quota)
        label = quotas.QUOTA_LEDGER_LABEL if published else binder.QUOTA_RECORD_LABEL
        key = quotas.QUOTA_DATA_KEY
    else:
        cm_name = ledger.ledger_name(name) if published else binder.record_name(name)
        label = ledger.LEDGER_LABEL if published else binder.RECORD_LABEL
        key = ledger.LEDGER_DATA_KEY
    return {
        "metadata": {
            "name": cm_name,
            "namespace": ledger.LEDGER_NAMESPACE,
            "labels": {label: "true"},
        },
        "data": {key: body},
    }


def held_of(name: str, published: list | None, record: list | None, view: dict) -> commit.Held:
    """A ledger from its two copies as the binder reads them (`commit.hold`, the real code)."""
    quota = name.split(":", 1)[1] if name.startswith("quota:") else None
    kind: Any = binder.QUOTA_LEDGERS if quota is not None else binder.CLUSTER_LEDGERS
    key = quota if quota is not None else name

    def copy_of(c: list | None, where: str) -> commit.Copy | None:
        if c is None:
            return None
        return commit.Copy(str(c[0]), kind.read(configmap(name, where, c[1]), key, kind.data_key))

    names = (f"published/{name}", f"record/{name}")
    return commit.hold(
        kind.fresh(key), copy_of(published, "ledgers"), copy_of(record, "records"), names=names,
        counted=lambda: view.get(name, 0),
    )  # fmt: skip


def commit_writes(name: str, held: commit.Held, body: str, changed: bool) -> list[list]:
    """`Binder.write_ledger`'s writes: the record first, then the published copy."""
    out = []
    if changed or held.write_record:
        out.append(["records", name, None if held.record is None else int(held.record), body])
    if changed or held.publish:
        out.append(["ledgers", name, None if held.published is None else int(held.published), body])
    return out


def binder_decide(case: Case, reads: dict, records: dict, view: dict, listed: list[dict]) -> dict:
    """The binder's pass as plnt_reconciler.binder makes it: the ledgers from their two copies,
    quotas first, then clusters; a ledger that cannot be read closes its cluster or quota. The
    writes (in order), the annotations, and the sequences its fleet view counts."""
    views = [commit.Replica.of(o) for o in listed]
    classes = {c["metadata"]["name"]: c for c in CLASSES}
    clusters = {c["metadata"]["name"]: c for c in fleet(case)}
    held = {n: held_of(n, reads[n], records[n], view) for n in ledger_names(case)}
    closed = {n: held[n].closed for n in clusters if held[n].closed is not None}
    fenced = commit.tenancy_refusals(views, clusters, namespaces(case))
    eligible = {v.key for v in views if v.cluster in clusters and v.cluster not in closed}
    decided, closed_quotas, writes, counted = {}, {}, [], {}
    quota_objs = {q["metadata"]["name"]: q for q in quota_objects(case)}
    for name, q in quota_objs.items():
        h = held[f"quota:{name}"]
        if h.closed is not None:
            closed_quotas[name] = h.closed
            counted[f"quota:{name}"] = h.closed.sequence
            continue
        d = commit.decide_quota(
            h.state, q, views, namespaces(case), eligible=eligible - set(fenced)
        )
        decided[name] = d
        writes += commit_writes(f"quota:{name}", h, d.ledger.model_dump_json(), d.changed)
        counted[f"quota:{name}"] = d.ledger.sequence
    refuse = {
        **commit.quota_refusals(views, list(decided.values())),
        **commit.closed_quota_refusals(quota_objs, closed_quotas, views, namespaces(case)),
        **fenced,
    }
    uids = {v.key: v.uid for v in views}
    annotate = []
    for c in fleet(case):
        name = c["metadata"]["name"]
        h = held[name]
        mine = [v for v in views if v.cluster == name]
        if h.closed is not None:
            _, writes_on = commit.refuse_closed(name, h.closed, mine)
            counted[name] = h.closed.sequence
        else:
            d = commit.decide(
                h.state, mine, commit.pools_of(c, classes), alive={v.uid for v in views},
                refuse=refuse,
            )  # fmt: skip
            writes += commit_writes(name, h, d.ledger.model_dump_json(), d.changed)
            writes_on = d.annotate
            counted[name] = d.ledger.sequence
        annotate += [[k, uids[k], w] for k, w in sorted(writes_on.items())]
    return {"writes": writes, "annotate": annotate, "view": counted}


# Actor state (immutable, hashable through its JSON): kind, pc, data, runs done.


def initial(case: Case) -> dict:
    actors = [{"kind": "proposer", "i": i, "pc": "list", "calls": [], "runs": 0}
              for i in range(len(case.deployments))]  # fmt: skip
    actors += [{"kind": "binder", "pc": "read", "read": None, "records": None, "decision": None,
                "runs": 0} for _ in range(case.binders)]  # fmt: skip
    api = fresh_api()
    if case.hand is not None:
        api["replicas"][HAND] = hand_made(case)
    return {"api": api, "actors": actors, "restarts": 0, "rendered": {}, "problems": [],
            "damage": 0, "backup": None}  # fmt: skip


def moves(case: Case, state: dict) -> list[tuple[int, str]]:
    out = []
    if case.damage is not None and state["damage"] < 2:
        out.append((-1, "damage" if state["damage"] == 0 else "repair"))
    for n, a in enumerate(state["actors"]):
        limit = case.proposer_runs if a["kind"] == "proposer" else case.binder_passes
        if a["runs"] < limit:
            out.append((n, "step"))
            if state["restarts"] < case.restarts and a["pc"] not in ("list", "read"):
                out.append((n, "restart"))
    return out


def step(case: Case, state: dict, n: int, what: str) -> dict:
    """One move, then what the ModelReplica function renders on the ledgers it leaves."""
    state = act(case, state, n, what)
    state["rendered"], problems = render(state["api"], state["rendered"])
    state["problems"] += problems
    return state


def damage(case: Case, state: dict) -> None:
    assert case.damage is not None
    how, which, name = case.damage
    api = state["api"]
    if how == "delete":
        state["backup"] = api["ledgers"].get(name)
        for where in ("ledgers", "records") if which == "both" else (which,):
            api[where].pop(name, None)
        return
    held = api[which].get(name)
    if held is None:
        return
    api["rv"] += 1
    if how == "corrupt":
        api[which][name] = [api["rv"], held[1][: len(held[1]) // 2]]
    else:  # ahead
        body = json.loads(held[1])
        body["sequence"] += 1
        api[which][name] = [api["rv"], json.dumps(body)]


def repair(case: Case, state: dict) -> None:
    """What docs/reconciler.md tells an operator to do."""
    assert case.damage is not None
    how, which, name = case.damage
    api = state["api"]
    if how != "delete":
        api[which].pop(name, None)  # the damaged copy: the binder rebuilds it from the other
    elif which == "both" and state["backup"] is not None and name not in api["ledgers"]:
        api_write_ledger(api, name, None, state["backup"][1])  # restored from a backup


def act(case: Case, state: dict, n: int, what: str) -> dict:
    state = copy.deepcopy(state)
    if n < 0:
        (damage if what == "damage" else repair)(case, state)
        state["damage"] += 1
        return state
    api, a = state["api"], state["actors"][n]
    if what == "restart":
        state["restarts"] += 1
        a.update({"pc": "list", "calls": []} if a["kind"] == "proposer" else
                 {"pc": "read", "read": None, "records": None, "decision": None})  # fmt: skip
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
    if a["pc"] == "read":  # the published copies (one list call), before the records
        a["read"] = {name: api["ledgers"].get(name) for name in ledger_names(case)}
        a["pc"] = "records"
    elif a["pc"] == "records":  # the records (one list call), before the replicas
        a["records"] = {name: api["records"].get(name) for name in ledger_names(case)}
        a["pc"] = "list"
    elif a["pc"] == "list":
        a["decision"] = binder_decide(case, a["read"], a["records"], api["view"], api_list(api))
        a["pc"] = "write"
        a["read"] = a["records"] = None
    elif a["pc"] == "write":  # one ConfigMap per step; a conflict starts the pass again
        d = a["decision"]
        if d["writes"]:
            where, name, version, body = d["writes"].pop(0)
            if not api_write_ledger(api, name, version, body, where):
                a.update({"pc": "read", "decision": None})
                return state
        if not d["writes"]:
            a["pc"] = "annotate"
    elif a["pc"] == "annotate":
        if a["decision"]["annotate"]:
            key, uid, writes = a["decision"]["annotate"].pop(0)
            api_annotate(api, key, uid, writes)
        if not a["decision"]["annotate"]:
            a["pc"] = "view"
    elif a["pc"] == "view":  # the fleet view (and quota status): what it counted
        api["view"].update(a["decision"]["view"])
        a.update({"pc": "read", "runs": a["runs"] + 1, "decision": None})
    return state


def ledger_names(case: Case) -> list[str]:
    return [c["metadata"]["name"] for c in fleet(case)] + [
        f"quota:{QUOTA}" for _ in quota_objects(case)
    ]


# --- the invariant ----------------------------------------------------------------------------


def render(api: dict, before: dict) -> tuple[dict, list[str]]:
    """What the ModelReplica function renders on the published ledgers the API server holds
    (by key: [uid, slots]), given what it rendered `before`, as functions/model_replica decides
    it (`binding.verify` on `binding.read_ledger` and `quota.quota_ledgers_of`): Bound renders;
    Unknown (a ledger it needs does not read) keeps what it rendered. And the problems: a replica
    that was rendered and is still there, same uid, no longer rendered."""
    held = api["ledgers"].get(f"quota:{QUOTA}")
    quota_cms = [configmap(f"quota:{QUOTA}", "ledgers", held[1])] if held is not None else []
    quotas_read, unreadable = ledger_parse.quota_ledgers_in(quota_cms)
    out: dict[str, list] = {}
    for key, obj in api["replicas"].items():
        uid = obj["metadata"]["uid"]
        was = before.get(key) if (before.get(key) or [None])[0] == uid else None
        held = published_ledger(api, obj["spec"]["clusterName"], rendered=was is not None)
        s = binding.verify(obj, held, quotas_read, unreadable)
        if s.state == binding.UNKNOWN and was is not None:
            out[key] = was
        elif s.state == binding.BOUND:
            out[key] = [uid, capacity.slots_json(s.slots or {})]
    problems = [
        f"{key} un-rendered while it is bound"
        for key, (uid, _) in before.items()
        if key not in out and (api["replicas"].get(key) or {}).get("metadata", {}).get("uid") == uid
    ]
    return out, problems


def published_ledger(
    api: dict, cluster: str, *, rendered: bool
) -> ledger.Ledger | ledger_parse.UnreadableLedgerError | None:
    """The cluster's published ledger as the ModelReplica function reads it (its own code)."""
    held = api["ledgers"].get(cluster)
    cms = [configmap(cluster, "ledgers", held[1])] if held else []
    return model_replica_fn.cluster_ledger(cms, cluster, rendered=rendered)


def rendered_states(state: dict) -> dict[str, binding.State]:
    """The rendered replicas, each as its demand and the slots it was rendered with."""
    api = state["api"]
    return {
        key: dataclasses.replace(
            binding.state_of(api["replicas"][key]),
            state=binding.BOUND,
            slots=capacity.slots_from_json(slots),
        )
        for key, (_, slots) in state["rendered"].items()
    }


def check(case: Case, state: dict) -> list[str]:
    """Rendered replicas fit their cluster's pool: independent counts, then slot by slot; they
    hold no more than the quota covering their namespaces; none is outside a fence; and none
    was un-rendered while still there."""
    problems = list(state["problems"])
    api = state["api"]
    states = rendered_states(state)
    if case.quota is not None:
        covered, hard = case.quota
        held = sum(
            binding.devices_of(api["replicas"][k]).get("gpu.nvidia.com", 0)
            for k in states
            if api["replicas"][k]["metadata"]["namespace"] in covered
        )
        if held > hard:
            problems.append(f"quota: {held} GPUs bound in {covered} on a hard limit of {hard}")
    if case.fence is not None:
        problems += [
            f"x0: {k} bound outside its fence"
            for k in states
            if api["replicas"][k]["spec"]["clusterName"] == "x0"
            and api["replicas"][k]["metadata"]["namespace"] not in case.fence
        ]
    for c in fleet(case):
        name = c["metadata"]["name"]
        keys = [k for k in states if api["replicas"][k]["spec"]["clusterName"] == name]
        bound = [states[k] for k in keys]
        # counted from what runs (the specs), never from a demand anyone wrote
        gpus = whole = 0
        for k in keys:
            for pods, asks, gang in spec_pods(api["replicas"][k]["spec"]):
                gpus += pods * (8 if gang else asks)
                whole += pods if gang else 0
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


def spec_pods(spec: dict) -> Iterator[tuple[int, int, bool]]:
    """(pods, GPUs each asks, whole node) of every member of a ModelReplica spec that asks for
    GPUs: copies times a Worker's nodes, read straight from the spec."""
    for e in spec.get("engines") or []:
        gang = any(m.get("role") in ("Leader", "Worker") for m in e.get("members") or [])
        for m in e.get("members") or []:
            asks = sum(int(r.get("count") or 1) for r in m.get("deviceRequests") or [])
            if asks:
                nodes = int((m.get("worker") or {}).get("nodes") or 1)
                pods = (nodes if m.get("role") == "Worker" else 1) * int(e.get("copies") or 1)
                yield pods, asks, gang


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
            pods * asks
            for key in state["rendered"]
            for pods, asks, _ in spec_pods(state["api"]["replicas"][key]["spec"])
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
    # A tenant's hand-made replica runs 4 copies of 2 GPUs but writes a demand of one copy;
    # with a 6-GPU proposal on the one 8-GPU node, only one of them is ever bound.
    "a hand-made replica under-states its demand": Case(
        nodes=1, deployments=(("a", 6, 1),), hand=(4, 2), proposer_runs=1,
    ),
    # x0 admits only namespace a; b's replica, placed on x0 first by its reconcile, is refused
    # there and ends on x1 (or nowhere), never bound on x0.
    "a fenced cluster": Case(
        nodes=1, deployments=(("a", 3, 1), ("b", 3, 1)), clusters=2, fence=("a",),
        proposer_runs=2, restarts=0,
    ),
}  # fmt: skip

# A ledger damaged at any point of the run, then repaired at any later point: two reconciles
# race for one node (one fits) under a binder that makes three passes.
RACE: dict[str, Any] = {"nodes": 1, "deployments": (("a", 6, 1), ("b", 6, 1)),
                        "binder_passes": 3, "proposer_runs": 1, "restarts": 0}  # fmt: skip
DAMAGE = {
    "published ledger corrupt": Case(**RACE, damage=("corrupt", "ledgers", "x0")),
    "record corrupt": Case(**RACE, damage=("corrupt", "records", "x0")),
    "published ledger ahead of its record": Case(**RACE, damage=("ahead", "ledgers", "x0")),
    "published ledger deleted": Case(**RACE, damage=("delete", "ledgers", "x0")),
    "record deleted": Case(**RACE, damage=("delete", "records", "x0")),
    "both copies deleted, one restored": Case(**RACE, damage=("delete", "both", "x0")),
    "quota ledger corrupt": Case(
        nodes=1, deployments=(("a", 3, 1), ("b", 3, 1)), quota=(("a", "b"), 4), proposer_runs=1,
        binder_passes=3, restarts=0, damage=("corrupt", "ledgers", f"quota:{QUOTA}"),
    ),
    "quota ledger deleted": Case(
        nodes=1, deployments=(("a", 3, 1), ("b", 3, 1)), quota=(("a", "b"), 4), proposer_runs=1,
        binder_passes=3, restarts=0, damage=("delete", "both", f"quota:{QUOTA}"),
    ),
    # Two binders at once both see the record gone and rebuild it: one create wins.
    "two binders, record deleted": Case(
        nodes=1, deployments=(("a", 5, 1), ("b", 5, 1)), binders=2, binder_passes=1,
        proposer_runs=1, restarts=0, damage=("delete", "records", "x0"),
    ),
    "a binder restarts around a corrupt record": Case(
        **{**RACE, "restarts": 1, "binder_passes": 2}, damage=("corrupt", "records", "x0"),
    ),
    "a binder restarts around a deleted published ledger": Case(
        **{**RACE, "restarts": 1, "binder_passes": 2}, damage=("delete", "ledgers", "x0"),
    ),
}  # fmt: skip


# An exhaustive search: 3 to 30 s a case on a free core (up to 16,000 states); room for a busy one.
@pytest.mark.timeout(480)
@pytest.mark.parametrize("case", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_ledger_never_over_commits_nor_unrenders(case: Case) -> None:
    """Whenever the damage and the repair come, no interleaving over-commits, and no replica
    the function rendered stops being rendered while it is there (`render`, `check`)."""
    states, finals, most = explore(case)
    assert finals > 0 and states > 50 and most > 0


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_no_interleaving_over_commits(case: Case) -> None:
    states, finals, most = explore(case)
    assert finals > 0
    assert states > 50  # the search really interleaved
    assert most > 0  # and something got bound in some interleaving


def test_a_loser_ends_bound_on_the_other_cluster_in_some_interleaving() -> None:
    _, _, most = explore(CASES["a loser is placed again elsewhere"])
    assert most == 12  # both 6-GPU replicas bound at once: one per cluster


def test_the_binder_sizes_a_commit_from_the_spec_not_the_annotation() -> None:
    """The hand-made replica is committed with a slot per copy (4 pods), whatever its
    annotation says; a binder that took the annotation would bind both it and the proposal,
    14 GPUs on 8, and the search finds that (the invariant is not vacuous)."""
    case = CASES["a hand-made replica under-states its demand"]
    _, _, most = explore(case)
    assert most == 8  # the hand-made replica alone (it is older), or the proposal alone
    real = commit.Replica.demand
    commit.Replica.demand = lambda self, pools: self.state.demand  # type: ignore[method-assign]
    try:
        with pytest.raises(AssertionError, match="x0: 14 GPUs bound on 8"):
            explore(case)
    finally:
        commit.Replica.demand = real  # type: ignore[method-assign]


def test_the_invariant_catches_the_defect_of_issue_15() -> None:
    """Rendering every proposal (no binder: each reconcile trusts its own snapshot) over-commits
    in some interleaving the search finds: the invariant is not vacuous."""
    case = Case(nodes=1, deployments=(("a", 6, 1), ("b", 6, 1)), binders=0, proposer_runs=1,
                restarts=0)  # fmt: skip
    with trusting_every_proposal(), pytest.raises(AssertionError, match="x0: 12 GPUs bound on 8"):
        explore(case)


@contextlib.contextmanager
def trusting_every_proposal() -> Iterator[None]:
    """The renderer without a binder: every proposal renders, whatever the ledgers hold (or whether
    there are any)."""
    real = binding.verify

    def trusting(obj: dict, *_: Any, **__: Any) -> binding.State:
        s = binding.state_of(obj)
        pool = capacity.Pool(8, capacity.Shape((("device:gpu", 8),)))
        slots = {k: tuple(pool.pack(v) or ()) for k, v in s.demand.items()}
        return dataclasses.replace(s, state=binding.BOUND, slots=slots)

    module = globals()
    real_read = module["published_ledger"]
    binding.verify = trusting
    module["published_ledger"] = lambda _, cluster, **__: ledger.Ledger(cluster=cluster)
    try:
        yield
    finally:
        binding.verify = real
        module["published_ledger"] = real_read


@contextlib.contextmanager
def ignoring_quota_ledgers() -> Iterator[None]:
    """A renderer that checks the cluster's ledger only (not the quota ledgers)."""
    real = binding.verify

    def cluster_only(obj: dict, held: Any, *_: Any, **kwargs: Any) -> binding.State:
        return real(obj, held, **kwargs)

    binding.verify = cluster_only
    try:
        yield
    finally:
        binding.verify = real


@contextlib.contextmanager
def binder_ignoring_quotas() -> Iterator[None]:
    real = commit.quota_refusals
    commit.quota_refusals = lambda *_: {}  # type: ignore[assignment]
    try:
        yield
    finally:
        commit.quota_refusals = real


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
    real = commit.tenancy_refusals
    commit.tenancy_refusals = lambda *_: {}  # type: ignore[assignment]
    try:
        with pytest.raises(AssertionError, match="bound outside its fence"):
            explore(case)
    finally:
        commit.tenancy_refusals = real


def test_a_fenced_out_deployment_ends_on_the_other_cluster_in_some_interleaving() -> None:
    _, _, most = explore(CASES["a fenced cluster"])
    assert most == 6  # both bound: a on x0, b on x1


def test_a_renderer_that_takes_unknown_for_unbound_is_caught() -> None:
    """A ModelReplica function that treats a ledger it cannot read as empty drops what a
    serving replica has rendered. The search finds that un-render (the invariant of the
    damage cases is not vacuous)."""
    module = globals()
    real = module["published_ledger"]

    def empty_when_unreadable(api: dict, cluster: str, **kwargs: Any) -> ledger.Ledger:
        read = real(api, cluster, **kwargs)
        return read if isinstance(read, ledger.Ledger) else ledger.Ledger(cluster=cluster)

    module["published_ledger"] = empty_when_unreadable
    try:
        with pytest.raises(AssertionError, match="un-rendered while it is bound"):
            explore(DAMAGE["published ledger corrupt"])
    finally:
        module["published_ledger"] = real
