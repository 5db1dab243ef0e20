"""The binder's decision (plnt.capacity.commit.decide), one rule per test."""

from __future__ import annotations

import copy

from plnt import capacity
from plnt.capacity import binding, commit, ledger
from tests.support import gpu_shape, spec_asking

ONE_GPU = {"h": (capacity.Pods(1, (("device:gpu", 1),)),)}
GPUS_8 = gpu_shape(8)


def replica(name: str, demand=ONE_GPU, uid: str | None = None, created: str = "t0") -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid or f"uid-{name}",
            "creationTimestamp": created,
            "annotations": {binding.DEMAND: capacity.demand_json(demand)},
        },
        "spec": spec_asking("a", demand),
    }


def views(*objs: dict) -> list[commit.Replica]:
    return [commit.Replica.of(o) for o in objs]


def apply(obj: dict, writes: dict) -> dict:
    out = copy.deepcopy(obj)
    for k, v in writes.items():
        if v is None:
            out["metadata"]["annotations"].pop(k, None)
        else:
            out["metadata"]["annotations"][k] = v
    return out


def decide(state: ledger.Ledger, objs: list[dict], nodes: int = 1) -> commit.Decision:
    rs = views(*objs)
    return commit.decide(state, rs, {"h": capacity.Pool(nodes, GPUS_8)}, alive={r.uid for r in rs})


def test_binds_what_fits_oldest_first_and_refuses_the_rest_in_devices() -> None:
    eights = {"h": (capacity.Pods(1, (("device:gpu", 5),)),)}
    objs = [replica("late", eights, created="t2"), replica("early", eights, created="t1")]
    d = decide(ledger.Ledger(cluster="a"), objs)
    assert d.changed
    assert sorted(d.ledger.entries) == ["ns/early"]
    assert d.refused == {
        "ns/late": "pool h: not enough free gpu (need 5 on one node, 3 of 8 free in the pool)"
    }
    bound = apply(objs[1], d.annotate["ns/early"])
    assert binding.state_of(bound).state == binding.BOUND
    refused = apply(objs[0], d.annotate["ns/late"])
    assert binding.state_of(refused).state == binding.REFUSED_STATE


def test_eight_one_gpu_replicas_share_one_node() -> None:
    objs = [replica(f"r{i}") for i in range(9)]
    d = decide(ledger.Ledger(cluster="a"), objs)
    assert len(d.ledger.entries) == 8
    assert list(d.refused) == ["ns/r8"]


def test_a_second_pass_changes_nothing_once_annotations_are_written() -> None:
    objs = [replica("a0"), replica("a1")]
    first = decide(ledger.Ledger(cluster="a"), objs)
    objs = [apply(o, first.annotate.get(f"ns/{o['metadata']['name']}", {})) for o in objs]
    again = decide(first.ledger, objs)
    assert not again.changed
    assert again.annotate == {}


def test_a_lost_annotation_write_is_redone_from_the_ledger() -> None:
    objs = [replica("a0")]
    first = decide(ledger.Ledger(cluster="a"), objs)  # ledger written, then the binder died
    again = decide(first.ledger, objs)
    assert not again.changed
    assert binding.BINDING in again.annotate["ns/a0"]


def test_entries_of_deleted_or_recreated_replicas_are_released() -> None:
    objs = [replica("a0"), replica("a1")]
    first = decide(ledger.Ledger(cluster="a"), objs)
    recreated = replica("a1", uid="uid-new")
    d = decide(first.ledger, [recreated])  # a0 deleted, a1 re-created under a new uid
    assert d.ledger.entries["ns/a1"].uid == "uid-new"
    assert "ns/a0" not in d.ledger.entries


def test_a_changed_spec_is_committed_again_not_kept() -> None:
    objs = [replica("a0")]
    first = decide(ledger.Ledger(cluster="a"), objs)
    bound = apply(objs[0], first.annotate["ns/a0"])
    bigger = copy.deepcopy(bound)
    bigger["spec"] = spec_asking("a", {"h": (capacity.Pods(1, (("device:gpu", 4),)),)})
    assert binding.state_of(bigger).state == binding.PENDING  # the old binding does not count
    d = decide(first.ledger, [bigger])
    assert d.ledger.entries["ns/a0"].digest == binding.state_of(bigger).digest
    assert d.ledger.entries["ns/a0"].parsed_slots()["h"][0].demand == (("device:gpu", 4),)


def test_the_demand_annotation_sizes_nothing() -> None:
    """A replica's author may write any demand: the binder sizes the commit from the spec
    (four copies of one GPU: four slots, whatever the annotation says), and an edit of the
    annotation alone is no edit of what runs."""
    four = {"h": (capacity.Pods(4, (("device:gpu", 1),)),)}
    obj = replica("a0", four)
    obj["metadata"]["annotations"][binding.DEMAND] = capacity.demand_json(ONE_GPU)
    d = decide(ledger.Ledger(cluster="a"), [obj])
    assert len(d.ledger.entries["ns/a0"].parsed_slots()["h"]) == 4
    # on a pool of two 1-GPU nodes it does not fit, annotation or not
    small = commit.decide(
        ledger.Ledger(cluster="a"),
        views(obj),
        {"h": capacity.Pool(2, gpu_shape(1))},
        alive={"uid-a0"},
    )
    assert small.ledger.entries == {}
    assert "ns/a0" in small.refused
    bound = apply(obj, d.annotate["ns/a0"])
    bound["metadata"]["annotations"][binding.DEMAND] = capacity.demand_json({})
    assert binding.verify(bound, d.ledger).state == binding.BOUND


def test_a_binding_annotation_without_a_ledger_entry_is_never_adopted() -> None:
    # Forged by its author (or left from a lost ledger): a proposal like any other, committed
    # only if it fits after those older than it; its own slots are never taken as given.
    eights = {"h": (capacity.Pods(1, (("device:gpu", 5),)),)}
    early = replica("early", eights, created="t0")
    forged = replica("forged", eights, created="t1")
    claimed = binding.binding_json(
        binding.state_of(forged).digest, "a", {"h": (capacity.Slot(0, (("device:gpu", 5),)),)}
    )
    forged["metadata"]["annotations"][binding.BINDING] = claimed
    assert binding.state_of(forged).state == binding.BOUND  # what the annotation claims
    d = decide(ledger.Ledger(cluster="a"), [forged, early])
    assert sorted(d.ledger.entries) == ["ns/early"]
    assert "ns/forged" in d.refused
    assert binding.verify(forged, d.ledger).state == binding.UNBACKED


def test_tenancy_refusals_are_never_committed() -> None:
    objs = [replica("a0")]
    d = commit.decide(
        ledger.Ledger(cluster="a"), views(*objs), {"h": capacity.Pool(1, GPUS_8)},
        alive={"uid-a0"}, refuse={"ns/a0": "cluster a does not admit namespace ns"},
    )  # fmt: skip
    assert d.ledger.entries == {}
    assert d.refused == {"ns/a0": "cluster a does not admit namespace ns"}
    assert binding.REFUSED in d.annotate["ns/a0"]


def test_the_binders_annotation_names_the_replica_it_was_written_for() -> None:
    d = decide(ledger.Ledger(cluster="a"), [replica("a0")])
    record = binding.BindingRecord.model_validate_json(d.annotate["ns/a0"][binding.BINDING])
    assert (record.replica, record.uid) == ("ns/a0", "uid-a0")


def test_a_shrunk_pool_reports_the_replicas_that_no_longer_fit() -> None:
    whole = {"h": (capacity.Pods(1, (), True),)}
    objs = [replica("a0", whole, created="t0"), replica("a1", whole, created="t1")]
    first = decide(ledger.Ledger(cluster="a"), objs, nodes=2)
    objs = [apply(o, first.annotate[f"ns/{o['metadata']['name']}"]) for o in objs]
    d = decide(first.ledger, objs, nodes=1)
    assert d.over == {"ns/a1": "pool h: 1 of its 1 pods no longer fit (1 nodes of 8 gpu now)"}
    shrunk = apply(objs[1], d.annotate["ns/a1"])
    assert binding.state_of(shrunk).over_committed == d.over["ns/a1"]
    # nothing new binds on a pool that is over-committed, wherever its free slots seem to be
    late = replica("late", created="t9")
    d2 = decide(d.ledger, [objs[0], shrunk, late], nodes=1)
    assert d2.refused == {
        "ns/late": "pool h: over-committed (it shrank after replicas were bound): nothing new binds"
    }
    # back to two nodes: the report goes
    d = decide(d.ledger, [objs[0], shrunk], nodes=2)
    assert d.annotate == {"ns/a1": {binding.OVER_COMMITTED: None}}
