"""Capacity follows the nodes: counting a workload cluster's Ready nodes per pool, capping each
pool by its spec, publishing what was seen (and keeping it when a reading fails), and what the
fleet (hence the scheduler, the binder and the fleet view) reads from it."""

from __future__ import annotations

from typing import Any

from plnt import capacity
from plnt.capacity import commit, fleet_view, ledger, offer, pool_nodes
from plnt.capacity.pool_nodes import Node, Observation, Record

T0 = 1_800_000_000.0
SINCE = "2027-01-15T08:00:00Z"


def node(pool: str | None, *, ready: str = "True", cordoned: bool = False,
         deleting: bool = False) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {"name": f"n-{pool}", "labels": {"kubernetes.io/hostname": "n"}}
    if pool is not None:
        meta["labels"]["modelplane.ai/pool"] = pool
    if deleting:
        meta["deletionTimestamp"] = SINCE
    return {
        "metadata": meta,
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                                  {"type": "Ready", "status": ready}]},
    }  # fmt: skip


def test_a_node_counts_when_ready_schedulable_and_not_being_deleted():
    assert pool_nodes.node_of(node("h100")) == Node("h100", True)
    assert pool_nodes.node_of(node("h100", ready="False")) == Node("h100", False)
    assert pool_nodes.node_of(node("h100", ready="Unknown")) == Node("h100", False)
    assert pool_nodes.node_of(node("h100", cordoned=True)) == Node("h100", False)
    assert pool_nodes.node_of(node("h100", deleting=True)) == Node("h100", False)
    no_status = {"metadata": {"labels": {"modelplane.ai/pool": "h100"}}}
    assert pool_nodes.node_of(no_status) == Node("h100", False)
    assert pool_nodes.node_of(node(None)) is None  # not a pool's node: not counted at all


def test_counts_are_ready_and_existing_per_pool():
    nodes = [Node("h100", True), Node("h100", False), Node("l4", True), Node("h100", True)]
    assert pool_nodes.count(nodes) == {"h100": (2, 3), "l4": (1, 1)}
    assert pool_nodes.count([]) == {}


def test_a_fixed_pool_offers_its_ready_nodes_capped_by_the_spec():
    record = Record({"h100": (3, 4)}, SINCE)
    assert pool_nodes.cap(4, False, record, "h100") == (
        3,
        f"3 of 4 nodes Ready (4 exist) on the workload cluster since {SINCE}",
    )
    more = Record({"h100": (6, 6)}, SINCE)  # nodes beyond the spec are not plnt's to use
    assert pool_nodes.cap(4, False, more, "h100") == (4, "")
    assert pool_nodes.cap(4, False, Record({"h100": (4, 4)}, SINCE), "h100") == (4, "")
    # counted once: a pool none of whose nodes is left offers nothing
    assert pool_nodes.cap(4, False, Record({"l4": (1, 1)}, SINCE), "h100")[0] == 0
    assert pool_nodes.cap(4, False, None, "h100") == (4, "")  # never counted: the spec


def test_an_autoscaled_pool_loses_only_the_nodes_that_are_there_and_not_ready():
    # maxNodeCount 8, two nodes up: the six missing ones are the autoscaler's to add
    assert pool_nodes.cap(8, True, Record({"h100": (2, 2)}, SINCE), "h100") == (8, "")
    offered, why = pool_nodes.cap(8, True, Record({"h100": (2, 3)}, SINCE), "h100")
    assert offered == 7
    assert why == (
        f"1 of its 3 nodes not Ready (autoscaled to 8) on the workload cluster since {SINCE}"
    )


def test_publishing_replaces_counts_that_changed_and_keeps_those_that_did_not():
    first = pool_nodes.publish(None, Observation(T0, {"h100": (4, 4)}))
    assert first == Record({"h100": (4, 4)}, "2027-01-15T08:00:00Z")
    assert pool_nodes.publish(first, Observation(T0 + 60, {"h100": (4, 4)})) is first
    dropped = pool_nodes.publish(first, Observation(T0 + 90, {"h100": (3, 3)}))
    assert dropped == Record({"h100": (3, 3)}, "2027-01-15T08:01:30Z")
    assert pool_nodes.publish(dropped, None) is dropped  # not read this time: it stands


def test_a_failed_reading_keeps_the_last_counts_and_says_why():
    counted = Record({"h100": (3, 4)}, SINCE)
    failed = pool_nodes.publish(counted, Observation(T0, error="GET x/api/v1/nodes: HTTP 403"))
    assert failed == Record({"h100": (3, 4)}, SINCE, "GET x/api/v1/nodes: HTTP 403")
    offered, why = pool_nodes.cap(4, False, failed, "h100")
    assert offered == 3
    assert why.endswith("; counts as last observed, the last reading failed: "
                        "GET x/api/v1/nodes: HTTP 403")  # fmt: skip
    # read again, the same counts: the error goes, the time the counts began stays
    again = pool_nodes.publish(failed, Observation(T0 + 5, {"h100": (3, 4)}))
    assert again == counted
    # never counted: a failure publishes nothing, the spec stands
    assert pool_nodes.publish(None, Observation(T0, error="refused")) is None


def test_a_cluster_whose_nodes_carry_no_pool_label_is_not_counted():
    assert pool_nodes.publish(None, Observation(T0, {})) is None
    # once counted, losing every labelled node is counted too: nothing is offered
    counted = Record({"h100": (1, 1)}, SINCE)
    assert pool_nodes.publish(counted, Observation(T0, {})) == Record({}, "2027-01-15T08:00:00Z")


def test_the_annotation_reads_back_and_nonsense_reads_as_not_counted():
    record = Record({"h100": (3, 4), "l4": (0, 0)}, SINCE, "why")
    assert pool_nodes.parse(record.to_annotation()) == record
    for bad in (None, 3, "{", '{"pools":{}}', '{"pools":[],"since":"' + SINCE + '"}',
                '{"pools":{"a":[5,4]},"since":"' + SINCE + '"}',
                '{"pools":{"a":[1]},"since":"' + SINCE + '"}',
                '{"pools":{"a":[1,1]},"since":"yesterday"}'):  # fmt: skip
        assert pool_nodes.parse(bad) is None, bad


def cluster(record: Record | None, *, autoscaled: bool = False) -> dict[str, Any]:
    pool: dict[str, Any] = {"name": "h100", "className": "h100-8x", "nodeCount": 4}
    if autoscaled:
        pool.update(nodeCount=2, maxNodeCount=8)
    annotations = {pool_nodes.ANNOTATION: record.to_annotation()} if record else {}
    return {
        "metadata": {"name": "lab", "labels": {"team": "a"}, "annotations": annotations},
        "spec": {"nodePools": [pool, {"name": "cpu", "className": "cpu", "nodeCount": 2}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_the_fleet_reads_each_pool_capped_with_why():
    seen = offer.cluster_of(cluster(Record({"h100": (3, 4), "cpu": (2, 2)}, SINCE)))
    assert [(p.name, p.capacity) for p in seen.pools] == [("h100", 3), ("cpu", 2)]
    assert seen.reduced == {"h100": f"3 of 4 nodes Ready (4 exist) on the workload cluster "
                                     f"since {SINCE}"}  # fmt: skip
    assert seen.ready  # fewer nodes is not an outage
    whole = offer.cluster_of(cluster(None))
    assert [(p.name, p.capacity) for p in whole.pools] == [("h100", 4), ("cpu", 2)]
    assert whole.reduced == {}
    scaled = offer.cluster_of(cluster(Record({"h100": (1, 2), "cpu": (2, 2)}, SINCE),
                                      autoscaled=True))  # fmt: skip
    assert [(p.name, p.capacity) for p in scaled.pools] == [("h100", 7), ("cpu", 2)]
    # status.pools (the InferenceCluster function's) is capped the same way
    obj = cluster(Record({"h100": (2, 4), "cpu": (2, 2)}, SINCE))
    obj["status"]["pools"] = [{"name": "h100", "className": "h100-8x", "nodeCapacity": 4}]
    assert [(p.name, p.capacity) for p in offer.cluster_of(obj).pools] == [("h100", 2)]


def test_the_fleet_view_carries_the_reduced_capacity_and_why():
    obj = cluster(Record({"h100": (3, 4), "cpu": (2, 2)}, SINCE))
    pools = {"h100": capacity.Pool(3, capacity.Shape(((capacity.device_key("gpu"), 8),)))}
    view = fleet_view.cluster_view(obj, pools, 7)
    (part,) = fleet_view.parts([view])
    (read,) = fleet_view.decode(part.text)
    assert read.cluster == offer.cluster_of(obj)
    assert [(p.name, p.capacity) for p in read.cluster.pools] == [("h100", 3), ("cpu", 2)]
    assert read.cluster.reduced["h100"].startswith("3 of 4 nodes Ready")
    # a cluster at full capacity adds nothing to the part
    (full,) = fleet_view.parts([fleet_view.cluster_view(cluster(None), {}, 7)])
    assert '"reduced"' not in full.text


def test_the_binder_never_unbinds_what_capacity_no_longer_holds():
    """A pool that shrank under its bound replicas reports them over-committed, keeps them in
    the ledger (they stay rendered), and commits nothing new there until it fits again."""
    shape = capacity.Shape(((capacity.device_key("gpu"), 8),))
    whole = capacity.Pods(1, (), True)
    four = {"h100": capacity.Pool(4, shape)}
    placed = four["h100"].copy().pack([whole, whole])
    assert placed is not None
    entries = {
        f"t/r-{i}": ledger.Entry(uid=f"u{i}", digest="d", sequence=1,
                                 slots=capacity.slots_json({"h100": (slot,)}))
        for i, slot in enumerate(placed)
    }  # fmt: skip
    held = ledger.Ledger(cluster="lab", sequence=1, entries=entries)
    one = {"h100": capacity.Pool(1, shape)}  # three of four nodes gone
    _, over, full = commit._charged(held.entries, one)
    assert set(over) == {"t/r-1"} and full == {"h100"}
    assert "no longer fit (1 nodes" in over["t/r-1"]
