"""The fleet view (plnt.capacity.fleet_view), pool usage (capacity.NodeUse, Pool.usage/load) and the
ledger's sequence: what the binder writes is what the ModelDeployment function reads back."""

from __future__ import annotations

import base64
import copy
import dataclasses
import gzip
import json
import re

import pytest

from plnt import capacity
from plnt.capacity import binding, commit, fleet_view, ledger, offer
from plnt_host.bench import scheduler as bench

CLASSES = {n: bench.inference_class(n) for n in sorted(bench.GPUS)}
GPU = "device:gpu"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# pool classes cycle by index: cluster-0000 pool-0 H100 x8, pool-1 L4 x1; cluster-0001 pool-0
# L4 x1, pool-1 L40S x8; 4 nodes each
CLUSTERS = {o["metadata"]["name"]: o for o in (bench.inference_cluster(i, 3) for i in range(3))}


def replica(i: int, cluster: str, pool: str = "pool-0", gpus: int | None = 1) -> dict:
    """A bench replica with a uid and creation time, asking `gpus` GPUs; gpus=None: no demand
    annotation (the binder sizes it from its spec)."""
    obj = bench.other_replica(i, CLUSTERS[cluster])
    obj["metadata"] |= {"uid": f"uid-{i}", "creationTimestamp": f"2025-01-01T00:00:{i:02d}Z"}
    member = obj["spec"]["engines"][0]["members"][0]
    member["nodePoolName"] = pool
    if gpus is not None:
        member["deviceRequests"][0]["count"] = gpus
        demand = {pool: (capacity.Pods(1, ((GPU, gpus),)),)}
        obj["metadata"]["annotations"] = {binding.DEMAND: capacity.demand_json(demand)}
    return obj


REPLICAS = [
    replica(0, "cluster-0000"),
    replica(1, "cluster-0000"),
    replica(2, "cluster-0000", gpus=3),
    replica(3, "cluster-0000", pool="pool-1", gpus=None),
    replica(4, "cluster-0001", pool="pool-1"),
    replica(5, "cluster-0001", pool="pool-1"),
    replica(6, "cluster-0001", gpus=2),  # 2 GPUs on an L4 x1 node: refused
]


def view(name: str, seq: int, labels: dict | None = None, used: dict | None = None):
    c = offer.Cluster(name, labels or {"team": "a"}, True, (offer.Pool("p", "h100", 2),), "gw")
    return fleet_view.ClusterView(c, seq, used or {})


def test_node_use_json_round_trip_and_bad_shapes() -> None:
    use = capacity.NodeUse(3, 2, True, capacity.vector({GPU: 8, capacity.CPU: 500}))
    assert use.to_json() == [3, 2, 1, {GPU: 8, "cpu": 500}]
    assert capacity.NodeUse.from_json(json.loads(json.dumps(use.to_json()))) == use
    for bad in ([0, 1, 0, []], [0, 1, 0], 5, [0, 1, 0, {GPU: "x"}]):
        try:
            capacity.NodeUse.from_json(bad)
        except (ValueError, TypeError):
            continue
        raise AssertionError(f"accepted {bad!r}")


def test_usage_lists_used_nodes_and_load_rebuilds_the_pool() -> None:
    shape = capacity.Shape(((GPU, 8),))
    pool = capacity.Pool(4, shape)
    assert pool.usage() == ()
    assert pool.pack([capacity.Pods(2, ((GPU, 3),)), capacity.Pods(1, (), True)]) is not None
    assert pool.usage() == (
        capacity.NodeUse(0, 2, False, ((GPU, 6),)),
        capacity.NodeUse(1, 1, True, ((GPU, 8),)),
    )
    fresh = capacity.Pool(4, shape)
    fresh.load((*pool.usage(), capacity.NodeUse(9, 1, False, ((GPU, 1),))))  # node 9 is gone
    assert (fresh.usage(), fresh.free, fresh.pods, fresh.whole) == (
        pool.usage(), pool.free, pool.pods, pool.whole,
    )  # fmt: skip
    probe = [
        capacity.Pods(1, ((GPU, 2),)),
        capacity.Pods(1, (), True),
        capacity.Pods(1, ((GPU, 3),)),
    ]
    assert fresh.copy().pack(probe) == pool.copy().pack(probe) is not None
    assert fresh.pack([capacity.Pods(3, (), True)]) is None  # two nodes are free, not three
    assert fresh.pack([capacity.Pods(1, ((GPU, 2),))]) == [capacity.Slot(0, ((GPU, 2),))]  # fullest


def test_bound_fleet_round_trips_through_the_view() -> None:
    committed, annotated = commit.bind_all(CLUSTERS, CLASSES, REPLICAS)
    states = {o["metadata"]["name"]: binding.state_of(o) for o in annotated}
    assert {n: s.state for n, s in states.items() if s.state != binding.BOUND} == {
        "other-6": binding.REFUSED_STATE
    }
    assert {s.ledger for s in states.values() if s.state == binding.BOUND} == {1}
    assert {n: led.sequence for n, led in committed.items()} == {
        "cluster-0000": 1, "cluster-0001": 1, "cluster-0002": 0,
    }  # fmt: skip

    all_parts = fleet_view.parts(commit.views(CLUSTERS, CLASSES, committed))
    cms = fleet_view.configmaps(all_parts)
    assert cms[-1]["metadata"] == {"name": fleet_view.INDEX_NAME, "namespace": "plnt-system"}
    assert fleet_view.fleet_size(cms[-1]["data"]) == 3
    got, bad = fleet_view.read(json.loads(json.dumps(cms[:-1])))  # the parts
    assert bad == []
    assert sorted(got) == sorted(CLUSTERS)
    for name, obj in CLUSTERS.items():
        v = got[name]
        assert v.cluster == offer.cluster_of(obj)  # name, labels, ready, pools, gateway
        assert v.cluster.gateway.startswith("10.0.") and v.cluster.ready
        assert v.ledger == committed[name].sequence
        charged = commit.committed_pools(committed[name], commit.pools_of(obj, CLASSES))
        assert v.used == {p: pool.usage() for p, pool in charged.items() if pool.usage()}
        for p, pool in charged.items():
            fresh = commit.pools_of(obj, CLASSES)[p]
            fresh.load(v.used.get(p, ()))
            assert (fresh.usage(), fresh.free, fresh.pods) == (pool.usage(), pool.free, pool.pods)
            for gpus in (1, 4, 8):
                demand = [capacity.Pods(1, ((GPU, gpus),))]
                assert fresh.copy().pack(demand) == pool.copy().pack(demand)
    assert got["cluster-0000"].used == {
        "pool-0": (capacity.NodeUse(0, 3, False, ((GPU, 5),)),),
        # no demand annotation: sized by its spec (one GPU), not a whole node
        "pool-1": (capacity.NodeUse(0, 1, False, ((GPU, 1),)),),
    }
    assert got["cluster-0001"].used == {"pool-1": (capacity.NodeUse(0, 2, False, ((GPU, 2),)),)}
    assert got["cluster-0002"].used == {}


def test_parts_group_by_labels_split_under_the_limit_and_are_stable() -> None:
    views = [view(f"c{i:02d}", i, {"team": "ab"[i % 2]}) for i in range(10)]
    whole = fleet_view.parts(views)
    assert sorted(sorted(p.labels.items()) for p in whole) == sorted(
        [[("plnt.work/fleet-view", "true"), ("team", t)] for t in "ab"]
    )
    one = len(json.dumps(fleet_view._encode(views[0], {"h100": 0}), separators=(",", ":")))
    # 5 clusters per label set, joined by commas: 1, 2, 3 or all 5 per part
    expected = {10: 10, 2 * one: 10, 2 * one + 1: 6, 3 * one + 1: 6, 3 * one + 2: 4}
    expected[fleet_view.PART_BYTES] = 2
    for limit, count in expected.items():
        all_parts = fleet_view.parts(views, limit=limit)
        assert fleet_view.parts(list(reversed(views)), limit=limit) == all_parts  # stable
        names = [p.name for p in all_parts]
        assert len(set(names)) == len(names)
        assert all(DNS_SUBDOMAIN.match(n) and len(n) <= 253 for n in names)
        seen = []
        for p in all_parts:
            decoded = fleet_view.decode(p.text)
            assert p.clusters == len(decoded) >= 1
            assert all(
                {**v.cluster.labels, "plnt.work/fleet-view": "true"} == p.labels for v in decoded
            )
            digest = fleet_view.labels_digest(decoded[0].cluster.labels)
            assert p.name.startswith(f"plnt-fleet-view-{digest}-")
            raw = json.loads(p.text)
            head = {"labels": raw["labels"], "classes": raw["classes"], "clusters": []}
            payload = len(p.text) - len(json.dumps(head, separators=(",", ":")))
            assert p.clusters == 1 or payload <= limit  # the clusters' JSON, not the head
            seen += [v.cluster.name for v in decoded]
        assert sorted(seen) == [v.cluster.name for v in views]  # each exactly once
        assert json.loads(fleet_view.index_text(all_parts)) == {"clusters": 10, "parts": names}
        assert len(all_parts) == count


def test_a_large_fleet_fits_in_configmaps() -> None:
    views = []
    for i in range(6000):
        obj = bench.inference_cluster(i, 8)
        pools = commit.pools_of(obj, CLASSES)
        for p in pools.values():  # every node used: the largest view
            p.take([capacity.Slot(n, ((GPU, 1),)) for n in range(p.nodes)])
        views.append(fleet_view.cluster_view(obj, pools, 7))
    all_parts = fleet_view.parts(views)
    assert len(all_parts) >= 2  # at most 2 MiB of JSON a part
    assert all(len(p.payload) <= fleet_view.PAYLOAD_BYTES for p in all_parts)  # under 1 MiB
    assert sum(len(p.text) for p in all_parts) > 10 * sum(len(p.payload) for p in all_parts)
    got, bad = fleet_view.read(fleet_view.configmaps(all_parts)[:-1])
    assert bad == [] and len(got) == 6000
    assert got["cluster-5999"].used["pool-7"] == tuple(
        capacity.NodeUse(n, 1, False, ((GPU, 1),)) for n in range(4)
    )


def test_read_reports_bad_parts_and_takes_the_later_sequence() -> None:
    good = fleet_view.configmaps(fleet_view.parts([view("c1", 3), view("c2", 1)]))[0]
    moved = fleet_view.configmaps(fleet_view.parts([view("c1", 5, {"team": "b"})]))[0]
    head = '{"labels":{},"classes":["x"],"clusters":'
    texts = {
        "garbage": "{not json",
        "null": "null",
        "no-clusters": '{"labels":{},"classes":[]}',
        "short-cluster": head + '[["c9",1,"g",1]]}',
        "bad-class": head + '[["c9",1,"g",1,[["p",4,2]]]]}',
        "bad-use": head + '[["c9",1,"g",1,[["p",0,2,[[0,1,0,[]]]]]]]}',
        "bad-ledger": head + '[["c9",1,"g","x",[]]]}',
    }
    bad_cms = [
        {"metadata": {"name": n}, "binaryData": {fleet_view.DATA_KEY: packed(t)}}
        for n, t in texts.items()
    ]
    bad_cms += [
        {"metadata": {"name": "no-key"}, "binaryData": {}},
        {"metadata": {"name": "no-data"}},
        {"metadata": {"name": "as-data"}, "data": {fleet_view.DATA_KEY: packed(head + "[]}")}},
        {"metadata": {"name": "not-base64"}, "binaryData": {fleet_view.DATA_KEY: "%%"}},
        {"metadata": {"name": "not-gzip"}, "binaryData": {fleet_view.DATA_KEY: "aGVsbG8="}},
        {"metadata": {"name": "cut"}, "binaryData": {fleet_view.DATA_KEY: packed(head)[:24]}},
    ]
    for order in ([good, moved], [moved, good]):
        got, bad = fleet_view.read([*bad_cms[:3], *order, *bad_cms[3:]])
        assert bad == [*texts, "no-key", "no-data", "as-data", "not-base64", "not-gzip", "cut"]
        assert sorted(got) == ["c1", "c2"]
        assert (got["c1"].ledger, dict(got["c1"].cluster.labels)) == (5, {"team": "b"})


def packed(text: str) -> str:
    return fleet_view.pack(text)


def test_payload_is_deterministic_and_bounded() -> None:
    text = fleet_view.parts([view("c1", 3)])[0].text
    assert packed(text) == packed(text)  # no gzip timestamp: an unchanged part is not rewritten
    assert fleet_view.unpack(packed(text)) == text
    bomb = base64.b64encode(gzip.compress(b" " * (fleet_view.MAX_TEXT_BYTES + 1))).decode()
    with pytest.raises(ValueError, match="larger than a part"):
        fleet_view.unpack(bomb)


def test_parts_are_halved_until_their_gzip_fits() -> None:
    views = [view(f"c{i:03d}", i) for i in range(64)]
    one = fleet_view.parts(views)
    assert len(one) == 1
    limit = len(one[0].payload) // 5
    split = fleet_view.parts(views, payload_limit=limit)
    assert len(split) >= 5
    assert all(len(p.payload) <= limit for p in split if p.clusters > 1)
    assert [v.cluster.name for p in split for v in fleet_view.decode(p.text)] == [
        v.cluster.name for v in views
    ]
    assert len({p.name for p in split}) == len(split)
    alone = fleet_view.parts(views[:1], payload_limit=1)  # one cluster over the limit: its own
    assert [p.clusters for p in alone] == [1]


def test_fleet_size() -> None:
    for data in (None, {}, {"index.json": "{x"}, {"index.json": "[]"}, {"index.json": "{}"}):
        assert fleet_view.fleet_size(data) is None
    assert fleet_view.fleet_size({"index.json": '{"clusters":"x","parts":[]}'}) is None
    assert fleet_view.fleet_size({"index.json": '{"clusters":12,"parts":["a"]}'}) == 12


def test_ledger_sequence_counts_writes_and_stamps_new_entries() -> None:
    obj = CLUSTERS["cluster-0000"]
    empty = commit.pools_of(obj, CLASSES)

    def decide(state: ledger.Ledger, objs: list[dict]) -> commit.Decision:
        rs = [commit.Replica.of(o) for o in objs]
        return commit.decide(state, rs, empty, alive={r.uid for r in rs})

    def annotated(objs: list[dict], d: commit.Decision) -> list[dict]:
        out = copy.deepcopy(objs)
        for o in out:
            key = f"{o['metadata']['namespace']}/{o['metadata']['name']}"
            o["metadata"]["annotations"].update(d.annotate.get(key, {}))
        return out

    objs = [replica(0, "cluster-0000"), replica(1, "cluster-0000", gpus=2)]
    first = decide(ledger.Ledger(cluster="cluster-0000"), objs)
    assert first.changed and first.ledger.sequence == 1
    assert {k: e.sequence for k, e in first.ledger.entries.items()} == {
        "other-team/other-0": 1, "other-team/other-1": 1,
    }  # fmt: skip
    for writes in first.annotate.values():
        assert binding.BindingRecord.model_validate_json(writes[binding.BINDING]).ledger == 1
    objs = annotated(objs, first)
    assert all(binding.state_of(o).ledger == 1 for o in objs)

    again = decide(first.ledger, objs)
    assert (again.changed, again.ledger.sequence, again.annotate) == (False, 1, {})
    lost = decide(ledger.Ledger(cluster="cluster-0000", sequence=4), objs)  # adopted as bound
    assert lost.ledger.sequence == 5 and lost.refused == {}
    assert {e.sequence for e in lost.ledger.entries.values()} == {5}
    assert {binding.state_of(o).ledger for o in annotated(objs, lost)} == {5}

    third = decide(again.ledger, [*objs, replica(2, "cluster-0000", gpus=4)])
    assert third.changed and third.ledger.sequence == 2
    assert {k: e.sequence for k, e in third.ledger.entries.items()} == {
        "other-team/other-0": 1, "other-team/other-1": 1, "other-team/other-2": 2,
    }  # fmt: skip
    assert list(third.annotate) == ["other-team/other-2"]
    stored = ledger.Ledger.model_validate_json(third.ledger.model_dump_json())
    assert stored == third.ledger
    assert ledger.Ledger.model_validate_json('{"cluster":"c"}').sequence == 0

    charged = commit.committed_pools(third.ledger, empty)
    assert charged["pool-0"].usage() == (capacity.NodeUse(0, 3, False, ((GPU, 7),)),)
    assert all(p.usage() == () for name, p in charged.items() if name != "pool-0")
    assert all(p.usage() == () for p in empty.values())  # the empty pools are not charged
    gone = ledger.Ledger(cluster="c", entries={"ns/x": ledger.Entry(
        uid="u", digest="d", slots={"nowhere": [[0, {GPU: 1}, False]]})})  # fmt: skip
    assert all(p.usage() == () for p in commit.committed_pools(gone, empty).values())


def test_per_cluster_labels_ride_with_their_cluster_not_the_part() -> None:
    """Crossplane labels each XR crossplane.io/composite=<name>: clusters still share parts."""
    views = [view(f"c{i}", i, {"team": "a", "crossplane.io/composite": f"c{i}"}) for i in range(4)]
    (part,) = fleet_view.parts(views)
    assert part.labels == {"team": "a", "plnt.work/fleet-view": "true"}
    got = {v.cluster.name: dict(v.cluster.labels) for v in fleet_view.decode(part.text)}
    assert got == {f"c{i}": {"team": "a", "crossplane.io/composite": f"c{i}"} for i in range(4)}
    assert fleet_view.shared({"team": "a", "crossplane.io/claim-name": "x"}) == {"team": "a"}
    head = '{"labels":{},"classes":["x"],"clusters":'
    for bad in ('[["c9",1,"g",1,[],"x",{}]]}', '[["c9",1,"g",1,[],{},{},{}]]}'):
        with pytest.raises(ValueError, match="own labels"):
            fleet_view.decode(head + bad)


def test_a_clusters_fence_rides_with_it() -> None:
    """spec.namespaceSelector reaches the scheduler through the view, with or without labels
    of its own; a cluster without one decodes with none (every namespace admitted)."""
    fence = {"matchLabels": {"team": "ml"}}
    fenced = view("f", 1, {"team": "a"})
    fenced = dataclasses.replace(fenced, cluster=dataclasses.replace(fenced.cluster, fence=fence))
    (part,) = fleet_view.parts([fenced, view("open", 1, {"team": "a"})])
    got = {v.cluster.name: v.cluster.fence for v in fleet_view.decode(part.text)}
    assert got == {"f": fence, "open": None}
