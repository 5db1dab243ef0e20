"""Scheduler properties over random fleets: never overcommits, deterministic, never raises."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from plnt import capacity as pcapacity
from plnt.capacity import scheduling
from plnt.capacity.offer import class_shape, cluster_of
from tests.scheduler.fleet import CLASSES, GPUS, StubCel, cluster, engine, member, placed, view

CLASS_NAMES = [*sorted(GPUS), "missing"]

pools = st.lists(st.tuples(st.sampled_from(CLASS_NAMES), st.integers(0, 6)), min_size=0, max_size=3)
clusters = st.lists(st.tuples(pools, st.booleans()), min_size=0, max_size=6)
members = st.sampled_from(
    [
        [member()],
        [member(count=8)],
        [member(selectors=("mem>=40",))],
        [member(selectors=("error",))],
        [member("Leader"), member("Worker", nodes=2)],
        [member("Leader", selective=False), member("Worker", nodes=1, count=8)],
    ]
)
engines = st.lists(st.tuples(members, st.integers(1, 3)), min_size=1, max_size=3).map(
    lambda es: [engine(f"e{i}", *m, copies=c) for i, (m, c) in enumerate(es)]
)
others = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(1, 4)), max_size=8)


def fleet_of(spec: list) -> list[dict]:
    return [
        cluster(f"c{i}", [(f"p{j}", cls, cap) for j, (cls, cap) in enumerate(ps)], ready=ready)
        for i, (ps, ready) in enumerate(spec)
    ]


def other_replicas(fleet: list[dict], spec: list) -> list[scheduling.PlacedReplica]:
    out = []
    for n, (ci, pj, nodes) in enumerate(spec):
        if not fleet:
            break
        c = fleet[ci % len(fleet)]
        ps = c["status"]["pools"]
        if ps:
            out.append(placed(f"o-{n}", c["metadata"]["name"], {ps[pj % len(ps)]["name"]: nodes}))
    return out


def schedule(engs: list, fleet: list, fleet_replicas: list, replicas: int) -> scheduling.Schedule:
    cel = StubCel()
    return scheduling.schedule(
        scheduling.Ask(view(engs), replicas, lambda labels: True),
        scheduling.FleetState([cluster_of(c) for c in fleet], CLASSES, fleet_replicas),
        scheduling.Owner(),
        scheduling.Cel(cel.evaluate, cel.compile),
    )


@settings(max_examples=150, deadline=None)
@given(engines, clusters, others, st.integers(0, 12))
def test_never_overcommits(engs: list, spec: list, other_spec: list, replicas: int) -> None:
    fleet = fleet_of(spec)
    existing = other_replicas(fleet, other_spec)
    result = schedule(engs, fleet, existing, replicas)

    # An independent count per pool where the scheduler added replicas: devices
    # taken (a whole-node pod takes all of its node's) never exceed nodes x devices per node,
    # whole-node pods never exceed nodes, and the pods still pack onto the nodes.
    nodes = {
        (c["metadata"]["name"], p["name"]): (p["nodeCapacity"], p["className"])
        for c in fleet
        for p in c["status"]["pools"]
    }
    per_node = {k["metadata"]["name"]: k["spec"]["devices"][0]["count"] for k in CLASSES}
    added = {(p.cluster, pool) for p in result.placed for pool in p.demand}
    for key in added:
        count, cls = nodes[key]
        gpus = per_node[cls]
        demands = [
            pods for r in existing if r.cluster == key[0] for pods in r.demand.get(key[1], ())
        ]
        demands += [
            pods for p in result.placed if p.cluster == key[0] for pods in p.demand.get(key[1], ())
        ]
        whole = sum(d.count for d in demands if d.whole)
        taken = sum(
            d.count * (gpus if d.whole else dict(d.demand).get("device:gpu", 0)) for d in demands
        )
        assert whole <= count, (key, whole, count)
        assert taken <= count * gpus, (key, taken, count * gpus)
        pool = pcapacity.Pool(
            count, class_shape(next(k for k in CLASSES if k["metadata"]["name"] == cls))
        )
        for r in existing:
            if r.cluster == key[0] and key[1] in r.demand:
                pool.pack(r.demand[key[1]])
        for p in result.placed:
            if p.cluster == key[0] and key[1] in p.demand:
                assert pool.pack(p.demand[key[1]]) is not None, (key, p.demand)
    ready = {
        c["metadata"]["name"] for c in fleet if c["status"]["conditions"][0]["status"] == "True"
    }
    assert all(p.cluster in ready for p in result.placed)
    assert len(result.placed) <= replicas
    assert result.scheduled == (len(result.placed) == replicas)
    assert result.message.startswith(f"placed {len(result.placed)} of {replicas} replicas")


@settings(max_examples=100, deadline=None)
@given(engines, clusters, others, st.integers(0, 12), st.randoms(use_true_random=False))
def test_deterministic_and_order_independent(
    engs: list, spec: list, other_spec: list, replicas: int, rnd: random.Random
) -> None:
    fleet = fleet_of(spec)
    existing = other_replicas(fleet, other_spec)
    first = schedule(engs, fleet, existing, replicas)
    again = schedule(engs, fleet, existing, replicas)
    shuffled_fleet, shuffled_existing = list(fleet), list(existing)
    rnd.shuffle(shuffled_fleet)
    rnd.shuffle(shuffled_existing)
    shuffled = schedule(engs, shuffled_fleet, shuffled_existing, replicas)
    assert first.placed == again.placed == shuffled.placed
    assert first.message == again.message
    assert first.reason == shuffled.reason


@settings(max_examples=150, deadline=None)
@given(
    engines,
    clusters,
    st.lists(st.sampled_from(["status", "pools", "conditions", "gateway", "labels"]), max_size=3),
    st.integers(0, 6),
)
def test_never_raises_on_half_reported_clusters(
    engs: list, spec: list, missing: list, replicas: int
) -> None:
    """Clusters still provisioning lack parts of their status; replicas may name unknown pools."""
    fleet = fleet_of(spec)
    for c in fleet:
        for field in missing:
            if field in ("status", "labels"):
                (c if field == "status" else c["metadata"]).pop(field, None)
            else:
                c.get("status", {}).pop(field, None)
    stray = [placed("s-0", "nowhere", {"p0": 3}), placed("s-1", "c0", {"unknown": 2})]
    result = schedule(engs, fleet, stray, replicas)
    assert result.reason in (
        scheduling.SCHEDULED,
        scheduling.INSUFFICIENT_CAPACITY,
        scheduling.NO_MATCHING_CLUSTERS,
        scheduling.INVALID_NODE_SELECTOR,  # a selector that errs on every device
    )
