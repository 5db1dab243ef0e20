"""Placement rules of the fleet scheduler, one table row per rule."""

from __future__ import annotations

import dataclasses

import pytest

from plnt import capacity
from plnt.capacity import scheduling
from plnt.capacity.offer import cluster_of
from tests.scheduler.fleet import (
    CLASSES,
    StubCel,
    cluster,
    engine,
    klass,
    member,
    placed,
    run,
    view,
    where,
)

H100 = ("gpu-h100", "h100", 4)
L40S = ("gpu-l40s", "l40s", 4)
L4 = ("gpu-l4", "l4", 4)

CASES = {
    "spreads one per cluster before doubling up": {
        "engines": [engine()],
        "clusters": [cluster("a", [H100]), cluster("b", [L40S]), cluster("c", [L4])],
        "replicas": 4,
        "expect": [
            ("c", ("gpu-l4",)),
            ("a", ("gpu-h100",)),
            ("b", ("gpu-l40s",)),
            ("c", ("gpu-l4",)),
        ],
    },
    "prefers the pool that wastes the fewest devices": {
        "engines": [engine()],
        "clusters": [cluster("a", [H100, L4])],
        "replicas": 1,
        "expect": [("a", ("gpu-l4",))],
    },
    "an 8-GPU request only fits 8-GPU devices": {
        "engines": [engine("big", member(count=8))],
        "clusters": [cluster("a", [L4]), cluster("b", [L40S])],
        "replicas": 1,
        "expect": [("b", ("gpu-l40s",))],
    },
    "every selector must hold": {
        "engines": [engine("big", member(count=8, selectors=("mem>=40", "cc>=9.0")))],
        "clusters": [cluster("a", [L40S]), cluster("b", [H100])],
        "replicas": 1,
        "expect": [("b", ("gpu-h100",))],
    },
    "new replicas go to Ready clusters only": {
        "engines": [engine()],
        "clusters": [cluster("a", [L4], ready=False), cluster("b", [H100])],
        "replicas": 1,
        "expect": [("b", ("gpu-h100",))],
    },
    "a gang costs leader + worker.nodes per copy": {
        "engines": [engine("g", member("Leader"), member("Worker", nodes=2), copies=2)],
        "clusters": [cluster("a", [("p", "h100", 5)]), cluster("b", [("p", "h100", 6)])],
        "replicas": 1,
        "expect": [("b", ("p",))],
    },
    "a member without nodeSelector costs nothing and lands on its engine's pool": {
        "engines": [engine("g", member("Leader", selective=False), member("Worker", nodes=1))],
        "clusters": [cluster("a", [("p", "h100", 1)])],
        "replicas": 1,
        "expect": [("a", ("p",))],
    },
    "an engine without any nodeSelector goes with the first engine's pool": {
        "engines": [
            engine("gpu", member(selectors=("mem>=10",))),
            engine("r", member(selective=False)),
        ],
        "clusters": [cluster("a", [("cpu", "cpu", 9), L4])],
        "classes": [klass("l4"), klass("cpu")],
        "replicas": 1,
        "expect": [("a", ("gpu-l4", "gpu-l4"))],
    },
    "all engines of a replica share its cluster, each with enough free nodes": {
        "engines": [engine("prefill"), engine("decode", copies=2)],
        "clusters": [cluster("a", [("x", "l4", 2), ("y", "l4", 1)])],
        "replicas": 1,
        "expect": [("a", ("y", "x"))],  # prefill gives way so decode's 2 copies fit on x
    },
    "clusters outside the selector are never used": {
        "engines": [engine()],
        "clusters": [
            cluster("a", [L4], labels={"env": "dev"}),
            cluster("b", [H100], labels={"env": "prod"}),
        ],
        "selector": lambda labels: labels.get("env") == "prod",
        "replicas": 2,
        "expect": [("b", ("gpu-h100",)), ("b", ("gpu-h100",))],
    },
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_placement(case: dict) -> None:
    case = dict(case)
    expect = case.pop("expect")
    engines, clusters, replicas = case.pop("engines"), case.pop("clusters"), case.pop("replicas")
    result = run(engines, clusters, replicas, **case)
    assert where(result) == expect
    assert result.reason == scheduling.SCHEDULED
    assert result.message == f"placed {replicas} of {replicas} replicas"


def test_capacity_counts_every_deployments_replicas() -> None:
    fleet = [placed("x-0", "a", {"gpu-l4": 3}), placed("y-0", "a", {"gpu-l4": 1})]
    result = run([engine()], [cluster("a", [L4])], 1, fleet=fleet)
    assert result.placed == []
    assert result.reason == scheduling.INSUFFICIENT_CAPACITY
    assert "placed 0 of 1 replicas" in result.message
    # Capacity is counted in devices; every L4 is taken (by whole-node replicas).
    assert (
        "cluster a: engine llm: pool gpu-l4: not enough free gpu (need 1 on one node, 0 of 4 "
        "free in the pool)"
    ) in result.message


def test_shortfall_says_why_per_cluster_and_pool() -> None:
    big = engine("big", member(count=8, selectors=("mem>=70",)))
    clusters = [
        cluster("a", [("h", "h100", 1)]),
        cluster("b", [L40S, L4]),
        cluster("c", [H100], ready=False),
    ]
    result = run([big], clusters, 3)
    assert where(result) == [("a", ("h",))]
    assert result.reason == scheduling.INSUFFICIENT_CAPACITY
    msg = result.message
    assert msg.startswith("placed 1 of 3 replicas; ")
    assert (
        "cluster a: engine big: pool h: not enough free gpu (need 8 on one node, 0 of 8 free in "
        "the pool)"
    ) in msg
    assert (
        "pool gpu-l40s: member Standalone request gpu: selector `mem>=70` false on device gpu"
        in msg
    )
    assert (
        "pool gpu-l4: member Standalone request gpu: device gpu has 1 per node, 8 requested" in msg
    )
    assert "cluster c: not Ready" in msg


def test_no_matching_clusters() -> None:
    result = run([engine()], [cluster("a", [L4])], 2, selector=lambda labels: False)
    assert result.reason == scheduling.NO_MATCHING_CLUSTERS
    assert result.message == (
        "placed 0 of 2 replicas; no InferenceCluster matches clusterSelector (1 on the fleet)"
    )


def test_unmatched_clusters_are_counted_in_a_shortfall() -> None:
    clusters = [cluster("a", [("p", "l4", 0)], labels={"x": "1"}), cluster("b", [L4])]
    result = run([engine()], clusters, 1, selector=lambda labels: labels.get("x") == "1")
    assert result.reason == scheduling.INSUFFICIENT_CAPACITY
    assert result.message.endswith("; 1 clusters do not match clusterSelector")


def test_invalid_selector_names_the_field() -> None:
    result = run([engine("e", member(selectors=("mem>=1", "syntax(")))], [cluster("a", [L4])], 1)
    assert result.reason == scheduling.INVALID_NODE_SELECTOR
    assert result.placed == []
    assert (
        "spec.engines[0].members[0].nodeSelector.devices[0].selectors[1].cel: Syntax error"
        in result.message
    )


def test_a_selector_error_on_a_device_is_no_match_with_the_error() -> None:
    result = run([engine("e", member(selectors=("error",)))], [cluster("a", [L4])], 1)
    assert result.placed == []
    assert "selector error on device gpu: no such attribute" in result.message


def test_cel_runs_once_per_expression_and_device_kind() -> None:
    cel = StubCel()
    clusters = [cluster(f"c{i:02d}", [H100, L40S, L4]) for i in range(30)]
    two = engine("e", member(selectors=("mem>=20", "cc>=8.0")))
    result = run([two], clusters, 30, cel=cel)
    assert len(result.placed) == 30
    assert sorted(cel.evaluations) == sorted(set(cel.evaluations))
    assert len(cel.evaluations) == 6  # 2 expressions x 3 classes


def test_synthetic_devices_are_dropped_from_device_requests() -> None:
    classes = [klass("l4"), klass("cpu", claim="Synthetic")]
    engines = [engine("e", member(selectors=("mem>=0",)))]
    result = run(engines, [cluster("a", [("cpu", "cpu", 2)])], 1, classes=classes)
    (placement,) = result.placed
    assert placement.engines[0].members[0].device_requests == ()
    # the Synthetic device is still counted: one of the node's one cpu device per pod
    assert placement.demand == {"cpu": (capacity.Pods(1, (("device:gpu", 1),)),)}

    result = run(engines, [cluster("a", [L4])], 1, classes=classes)
    assert result.placed[0].engines[0].members[0].device_requests == (
        {
            "name": "gpu",
            "count": 1,
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": "mem>=0"}],
        },
    )


def test_pins_survive_a_degraded_cluster_and_go_with_a_deleted_one() -> None:
    own = [
        placed("m-0", "degraded", {"gpu-l4": 1}, "m"),
        placed("m-1", "deleted", {"gpu-l4": 1}, "m"),
    ]
    clusters = [cluster("degraded", [L4], ready=False), cluster("b", [L4])]
    result = run([engine()], clusters, 2, own=own, fleet=own)
    assert [r.name for r in result.kept] == ["m-0"]
    assert [r.name for r in result.released] == ["m-1"]
    assert where(result) == [("b", ("gpu-l4",))]
    assert "m-1 released (cluster deleted is gone)" in result.message
    assert result.reason == scheduling.SCHEDULED


def test_scaling_down_releases_degraded_then_highest_index() -> None:
    own = [
        placed("m-0", "a", {"gpu-l4": 1}, "m"),
        placed("m-1", "bad", {"gpu-l4": 1}, "m"),
        placed("m-2", "a", {"gpu-l4": 1}, "m"),
        placed("m-10", "a", {"gpu-l4": 1}, "m"),
    ]
    clusters = [cluster("a", [L4]), cluster("bad", [L4], ready=False)]
    result = run([engine()], clusters, 2, own=own, fleet=own)
    assert [r.name for r in result.kept] == ["m-0", "m-2"]
    assert sorted(r.name for r in result.released) == ["m-1", "m-10"]
    assert result.placed == []


def test_pinned_replicas_count_for_spreading_and_capacity() -> None:
    own = [placed("m-0", "a", {"gpu-l4": 3}, "m")]
    clusters = [cluster("a", [L4]), cluster("b", [L4])]
    result = run([engine()], clusters, 3, own=own, fleet=own)
    assert where(result) == [("b", ("gpu-l4",)), ("a", ("gpu-l4",))]


def test_keep_only_never_places() -> None:
    result = scheduling.schedule(
        scheduling.Ask(view([engine()]), 3, lambda labels: True, place_new=False),
        scheduling.FleetState([cluster_of(cluster("a", [L4]))], [klass("l4")]),
        scheduling.Owner(own=[placed("m-0", "a", {"gpu-l4": 1}, "m")]),
        scheduling.Cel(StubCel().evaluate, StubCel.compile),
    )
    assert [r.name for r in result.kept] == ["m-0"]
    assert result.placed == []


def test_a_replica_made_by_hand_costs_a_whole_node_per_pod_with_devices() -> None:
    obj = {
        "metadata": {
            "name": "r-0",
            "namespace": "x",
            "labels": {"modelplane.ai/deployment": "r"},
        },
        "spec": {
            "clusterName": "a",
            "engines": [
                {
                    "name": "g",
                    "members": [
                        {"role": "Leader", "nodePoolName": "p", "deviceRequests": [{"name": "g"}]},
                        {
                            "role": "Worker",
                            "worker": {"nodes": 2},
                            "nodePoolName": "p",
                            "deviceRequests": [{"name": "g"}],
                        },
                    ],
                },
                {
                    "name": "h",
                    "members": [{"nodePoolName": "q", "deviceRequests": [{"name": "g"}]}],
                },
                {"name": "cpu", "members": [{"nodePoolName": "q"}]},
            ],
        },
    }
    replica = scheduling.placed_replica(obj)
    assert dict(replica.demand) == capacity.whole_nodes({"p": 3, "q": 1})
    assert replica.engine_pools == (("g", "p"), ("h", "q"), ("cpu", "q"))
    assert (replica.deployment, replica.cluster) == ("r", "a")


# --- devices, not nodes -----------------------------------------------------------------------


def test_one_gpu_replicas_share_an_eight_gpu_node_up_to_its_devices() -> None:
    result = run([engine()], [cluster("a", [("h", "h100", 1)])], 9)
    assert where(result) == [("a", ("h",))] * 8
    assert result.reason == scheduling.INSUFFICIENT_CAPACITY
    assert result.message == (
        "placed 8 of 9 replicas; cluster a: engine llm: pool h: not enough free gpu (need 1 on "
        "one node, 0 of 8 free in the pool)"
    )
    assert {p.demand["h"] for p in result.placed} == {(capacity.Pods(1, (("device:gpu", 1),)),)}


def test_pods_pack_per_node_not_per_pool() -> None:
    # Two nodes of 8: three 3-GPU pods never share a node, so four fit, not five (16 >= 15).
    big = engine("e", member(count=3))
    result = run([big], [cluster("a", [("h", "h100", 2)])], 5)
    assert len(result.placed) == 4
    assert "pool h: not enough free gpu (need 3 on one node, 4 of 16 free in the pool)" in (
        result.message
    )


def test_gangs_stay_whole_node() -> None:
    gang = engine("g", member("Leader"), member("Worker", nodes=1))
    result = run([gang], [cluster("a", [("h", "h100", 3)])], 2)
    assert where(result) == [("a", ("h",))]
    assert result.placed[0].demand["h"] == (
        capacity.Pods(1, (("device:gpu", 1),), whole=True),
        capacity.Pods(1, (("device:gpu", 1),), whole=True),
    )
    assert "pool h: not enough free nodes (need 2, free 1)" in result.message


def test_a_shared_node_is_not_free_for_a_gang() -> None:
    fleet = [
        scheduling.PlacedReplica(
            namespace="research",
            name="small-0",
            deployment="small",
            revision="r",
            cluster="a",
            engine_pools=(("llm", "h"),),
            demand={"h": (capacity.Pods(1, (("device:gpu", 1),)),)},
        )
    ]
    gang = engine("g", member("Leader"), member("Worker", nodes=1))
    result = run([gang], [cluster("a", [("h", "h100", 2)])], 1, fleet=fleet)
    assert result.placed == []
    assert "not enough free nodes (need 2, free 1)" in result.message
    # ... while a 1-GPU replica joins the used node rather than opening the empty one
    result = run([engine()], [cluster("a", [("h", "h100", 2)])], 1, fleet=fleet)
    assert len(result.placed) == 1


def test_cpu_and_memory_count_where_the_class_declares_them() -> None:
    cls = klass("h100")
    cls["spec"]["nodeResources"] = {"cpu": "16", "memory": "64Gi"}
    hungry = member()
    hungry["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "6", "memory": "8Gi"}
    }
    result = run([engine("e", hungry)], [cluster("a", [("h", "h100", 1)])], 3, classes=[cls])
    assert len(result.placed) == 2  # 2 x 6 CPUs of 16; GPUs are left
    assert result.placed[0].demand["h"] == (
        capacity.Pods(1, (("cpu", 6000), ("device:gpu", 1), ("memory", 8 * 2**30))),
    )
    assert "pool h: not enough free cpu (need 6000 on one node, 4000 of 16000 free" in (
        result.message
    )
    # a class that does not declare them: GPUs are the only limit
    result = run([engine("e", hungry)], [cluster("a", [("h", "h100", 1)])], 3)
    assert len(result.placed) == 3


def test_the_pool_that_wastes_least_still_wins_and_small_nodes_break_ties() -> None:
    # An empty H100 node would idle 7 GPUs; an L4 idles none.
    result = run([engine()], [cluster("a", [H100, L4])], 1)
    assert where(result) == [("a", ("gpu-l4",))]
    # joining a used H100 node idles nothing either: the L4 (smaller node) still wins the tie
    fleet = [
        scheduling.PlacedReplica(
            namespace="o",
            name="x-0",
            deployment="x",
            revision="r",
            cluster="a",
            engine_pools=(("llm", "gpu-h100"),),
            demand={"gpu-h100": (capacity.Pods(1, (("device:gpu", 1),)),)},
        )
    ]
    result = run([engine()], [cluster("a", [H100, L4])], 2, fleet=fleet)
    assert where(result) == [("a", ("gpu-l4",)), ("a", ("gpu-l4",))]


def test_bound_replicas_count_by_their_slots_refused_ones_not_at_all() -> None:
    def replica(name: str, **kw) -> scheduling.PlacedReplica:
        return scheduling.PlacedReplica(
            namespace="o",
            name=name,
            deployment="o",
            revision="r",
            cluster="a",
            engine_pools=(("llm", "h"),),
            demand={"h": (capacity.Pods(1, (("device:gpu", 8),)),)},
            **kw,
        )

    bound = replica("b", slots={"h": (capacity.Slot(0, (("device:gpu", 8),)),)}, state="Bound")
    refused = replica("r", state="Refused", message="full")
    result = run(
        [engine("e", member(count=8))],
        [cluster("a", [("h", "h100", 2)])],
        2,
        fleet=[bound, refused],
    )
    assert len(result.placed) == 1  # node 0 is bound; the refused one holds nothing


def test_a_refused_replica_is_replaced_away_from_the_pool_that_refused_it() -> None:
    refused = scheduling.PlacedReplica(
        namespace="ns",
        name="m-0",
        deployment="m",
        revision="r1",
        cluster="a",
        engine_pools=(("llm", "gpu-l4"),),
        demand={"gpu-l4": (capacity.Pods(1, (("device:gpu", 1),)),)},
        state="Refused",
        message="pool gpu-l4: not enough free gpu",
    )
    clusters = [cluster("a", [("gpu-l4", "l4", 1)]), cluster("b", [("gpu-l4", "l4", 1)])]
    result = run([engine()], clusters, 1, own=[refused], fleet=[refused])
    assert [r.name for r in result.released] == ["m-0"]
    assert where(result) == [("b", ("gpu-l4",))]  # a's one L4 looked free, the binder said no
    assert "m-0 released (the binder refused it: pool gpu-l4: not enough free gpu)" in (
        result.message
    )


FENCED_OFF = {"matchLabels": {"team": "research"}}  # does not admit namespace ns (unlabelled)
PIN_UNDER_A_FENCE = {
    # own replica m-0 on cluster a (fenced or not) -> (kept?, where the replacement goes, said)
    "a proposal on an open cluster stays": ("Pending", None, True, [], ""),
    "a proposal the fence now refuses goes, and b takes the replica": (
        "Pending",
        FENCED_OFF,
        False,
        [("b", ("gpu-l4",))],
        "m-0 released (cluster a does not admit namespace ns)",
    ),
    "a bound replica keeps its pin under a new fence": ("Bound", FENCED_OFF, True, [], ""),
    "a refusal for the fence goes, and says the binder's words": (
        "Refused",
        FENCED_OFF,
        False,
        [("b", ("gpu-l4",))],
        "m-0 released (the binder refused it: cluster a does not admit namespace ns)",
    ),
}


@pytest.mark.parametrize(
    ("state", "fence", "kept", "expect", "said"),
    PIN_UNDER_A_FENCE.values(),
    ids=PIN_UNDER_A_FENCE.keys(),
)
def test_a_pin_not_yet_bound_lasts_only_while_its_cluster_admits_the_namespace(
    state: str, fence: dict | None, kept: bool, expect: list, said: str
) -> None:
    own = scheduling.PlacedReplica(
        namespace="ns",
        name="m-0",
        deployment="m",
        revision="r1",
        cluster="a",
        engine_pools=(("llm", "gpu-l4"),),
        demand={"gpu-l4": (capacity.Pods(1, (("device:gpu", 1),)),)},
        slots={"gpu-l4": (capacity.Slot(0, (("device:gpu", 1),)),)} if state == "Bound" else None,
        state=state,
        message="cluster a does not admit namespace ns" if state == "Refused" else "",
    )
    a = cluster_of(cluster("a", [("gpu-l4", "l4", 2)]))
    clusters = [
        dataclasses.replace(a, fence=fence),
        cluster_of(cluster("b", [("gpu-l4", "l4", 2)])),
    ]
    cel = StubCel()
    result = scheduling.schedule(
        scheduling.Ask(view([engine()]), 1, lambda labels: True),
        scheduling.FleetState(clusters, CLASSES, [own]),
        scheduling.Owner(own=[own], namespace="ns", labels={"kubernetes.io/metadata.name": "ns"}),
        scheduling.Cel(cel.evaluate, cel.compile),
    )
    assert [r.name for r in result.kept] == (["m-0"] if kept else [])
    assert where(result) == expect
    assert result.scheduled
    assert said in result.message
    if kept:
        assert "released" not in result.message
