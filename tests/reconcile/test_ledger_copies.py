"""A ledger kept twice (plnt.capacity.commit.hold): what the binder decides from, what it rebuilds,
and when it closes a cluster; how a closed cluster is refused and shown in the fleet view."""

from __future__ import annotations

import pytest

from plnt import capacity
from plnt.capacity import binding, commit, fleet_view, ledger, ledger_parse, scheduling
from plnt_reconciler import binder
from tests.reconcile.test_ledger import apply, replica
from tests.scheduler.fleet import StubCel, cluster, engine, klass, member, view

NAMES = ("plnt-system/plnt-ledger-a", "plnt-system/plnt-ledger-record-a")
ENTRY = ledger.Entry(uid="uid-r0", digest="d", slots={"h": [[0, 1, {}]]}, sequence=1)


def state(sequence: int, *keys: str) -> ledger.Ledger:
    return ledger.Ledger(cluster="a", sequence=sequence, entries=dict.fromkeys(keys, ENTRY))


def copy(where: str, body: ledger.Ledger | str, version: str = "7") -> commit.Copy:
    """A copy as the binder reads it: the published one as the functions do."""
    text = body if isinstance(body, str) else body.model_dump_json()
    name = where.split("/", 1)[1]
    published = where == NAMES[0]
    label = ledger.LEDGER_LABEL if published else binder.RECORD_LABEL
    cm = {"metadata": {"name": name, "namespace": "plnt-system", "labels": {label: "true"}},
          "data": {ledger.LEDGER_DATA_KEY: text}}  # fmt: skip
    return commit.Copy(version, binder.CLUSTER_LEDGERS.read(cm, "a", ledger.LEDGER_DATA_KEY))


def hold(published: commit.Copy | None, record: commit.Copy | None, counted: int = 0):
    return commit.hold(
        ledger.Ledger(cluster="a"), published, record, names=NAMES, counted=lambda: counted
    )


def test_in_step_copies_bind_from_the_record() -> None:
    held = hold(copy(NAMES[0], state(2, "ns/r0"), "5"), copy(NAMES[1], state(2, "ns/r0"), "6"))
    assert (held.state, held.published, held.record) == (state(2, "ns/r0"), "5", "6")
    assert (held.publish, held.write_record, held.closed) == (False, False, None)


def test_a_published_copy_behind_its_record_is_published_again() -> None:
    """A binder stopped between its two writes: the record holds the commit, nothing else."""
    held = hold(copy(NAMES[0], state(1)), copy(NAMES[1], state(2, "ns/r0")))
    assert held.state == state(2, "ns/r0") and held.publish and held.closed is None


def test_a_lost_copy_is_rebuilt_from_the_other() -> None:
    lost_published = hold(None, copy(NAMES[1], state(2, "ns/r0"), "6"), counted=2)
    assert (lost_published.state, lost_published.published, lost_published.publish) == (
        state(2, "ns/r0"),
        None,
        True,
    )
    assert lost_published.rebuilt == f"{NAMES[0]} from {NAMES[1]}"
    lost_record = hold(copy(NAMES[0], state(2, "ns/r0"), "5"), None, counted=2)
    assert (lost_record.state, lost_record.record, lost_record.write_record) == (
        state(2, "ns/r0"),
        None,
        True,
    )
    assert lost_record.rebuilt == f"{NAMES[1]} from {NAMES[0]}"


def test_a_new_cluster_starts_empty_and_a_lost_one_is_closed() -> None:
    assert hold(None, None).state == ledger.Ledger(cluster="a")
    lost = hold(None, None, counted=4)
    assert lost.state is None and lost.closed is not None
    assert (lost.closed.reason, lost.closed.sequence, lost.closed.known) == (
        commit.LEDGER_LOST,
        4,
        None,
    )
    assert lost.closed.message == (
        f"ConfigMaps {NAMES[0]} and {NAMES[1]} are both gone, after the binder committed sequence "
        "4: restore either from a backup: nothing binds until it is repaired (docs/reconciler.md)"
    )


@pytest.mark.parametrize(
    ("published", "record", "reason", "known"),
    [
        ("{oops", state(2, "ns/r0"), ledger_parse.LEDGER_CORRUPT, {"ns/r0"}),
        (state(2, "ns/r0"), '{"cluster": "a", "x": 1}', ledger_parse.LEDGER_MALFORMED, {"ns/r0"}),
        ("{oops", "[]", ledger_parse.LEDGER_CORRUPT, None),
        (state(3, "ns/r0"), state(2, "ns/r1"), commit.LEDGER_DIVERGED, {"ns/r0", "ns/r1"}),
        (state(2), state(2, "ns/r0"), commit.LEDGER_DIVERGED, {"ns/r0"}),
    ],
    ids=["published corrupt", "record malformed", "both unreadable", "published ahead",
         "same sequence, other content"],
)  # fmt: skip
def test_what_does_not_read_closes_the_cluster_and_says_what_it_still_knows(
    published, record, reason, known
) -> None:
    held = hold(copy(NAMES[0], published, "5"), copy(NAMES[1], record, "6"), counted=1)
    assert held.state is None and held.closed is not None
    assert held.closed.reason == reason
    assert held.closed.known == (None if known is None else frozenset(known))
    assert held.closed.sequence == max(
        [1] + [s.sequence for s in (published, record) if isinstance(s, ledger.Ledger)]
    )
    assert held.closed.message.endswith("nothing binds until it is repaired (docs/reconciler.md)")
    assert (held.published, held.record) == ("5", "6")


def test_the_fault_named_is_the_one_the_function_names_too() -> None:
    held = hold(copy(NAMES[0], "{oops", "5"), copy(NAMES[1], state(2), "6"))
    assert held.closed is not None
    assert held.closed.message == (
        f"ConfigMap {NAMES[0]} is not JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)): nothing binds until it is repaired (docs/reconciler.md)"
    )
    record_ahead = hold(copy(NAMES[0], state(1), "5"), copy(NAMES[1], '{"cluster": "b"}', "6"))
    assert record_ahead.closed is not None
    assert record_ahead.closed.message.startswith(
        f"ConfigMap {NAMES[1]} is the ledger of cluster 'b', not of 'a'"
    )


def test_a_closed_cluster_refuses_only_proposals_no_copy_can_hold() -> None:
    objs = [replica("r0"), replica("r1"), replica("r2")]
    bound = apply(
        objs[2],
        {binding.BINDING: binding.binding_json(binding.state_of(objs[2]).digest, "a", {})},
    )
    views = [commit.Replica.of(o) for o in (objs[0], objs[1], bound)]
    closed = commit.Closed(
        ledger_parse.LEDGER_CORRUPT, "ConfigMap x is not JSON", 3, frozenset({"ns/r0"})
    )
    refused, annotate = commit.refuse_closed("a", closed, views)
    assert refused == dict.fromkeys(
        ("ns/r0", "ns/r1", "ns/r2"), "cluster a: ConfigMap x is not JSON"
    )
    assert list(annotate) == ["ns/r1"]  # not r0 (a copy holds it), not r2 (claims a binding)
    refusal = binding.state_of(apply(objs[1], annotate["ns/r1"]))
    assert (refusal.state, refusal.message) == (binding.REFUSED_STATE, refused["ns/r1"])
    unknown = commit.Closed(commit.LEDGER_LOST, "both gone", 3, None)
    assert commit.refuse_closed("a", unknown, views)[1] == {}  # a lost copy may hold any


def test_a_closed_quota_refuses_new_commits_in_the_namespaces_it_covers() -> None:
    quota = {"metadata": {"name": "q"}, "spec": {"namespaceSelector": {"matchLabels": {"t": "x"}}}}
    views = [commit.Replica.of(replica("r0"))]
    closed = {"q": commit.Closed(ledger_parse.LEDGER_CORRUPT, "ConfigMap q is not JSON")}
    assert commit.closed_quota_refusals({"q": quota}, closed, views, {"ns": {"t": "x"}}) == {
        "ns/r0": "InferenceQuota q: ConfigMap q is not JSON"
    }
    assert commit.closed_quota_refusals({"q": quota}, closed, views, {"ns": {"t": "y"}}) == {}
    decided = commit.decide(
        state(1),
        views,
        {"h": capacity.Pool(1, capacity.Shape((("device:gpu", 8),)))},
        alive={"uid-r0"},
        refuse={"ns/r0": "InferenceQuota q: ConfigMap q is not JSON"},
    )
    assert not decided.changed and decided.refused == {
        "ns/r0": "InferenceQuota q: ConfigMap q is not JSON"
    }


def test_the_fleet_view_offers_nothing_on_a_closed_cluster_and_says_why() -> None:
    classes = {"h100": klass("h100")}
    clusters = {n: cluster(n, [("h", "h100", 2)]) for n in ("a", "b")}
    committed = {"b": state(1)}
    why = "ConfigMap plnt-system/plnt-ledger-a is not JSON (...): nothing binds"
    views = commit.views(
        clusters, classes, committed, {"a": commit.Closed(ledger_parse.LEDGER_CORRUPT, why, 5)}
    )
    (part,) = fleet_view.parts(views)
    read = {v.cluster.name: v for v in fleet_view.decode(part.text)}
    assert (read["a"].cluster.closed, read["a"].ledger, dict(read["a"].used)) == (why, 5, {})
    assert (read["b"].cluster.closed, read["b"].ledger) == ("", 1)

    spec = {"engines": [engine("llm", member(count=1))]}
    cel = StubCel()
    result = scheduling.schedule(
        scheduling.Ask(view(spec["engines"]), 2, lambda labels: True),
        scheduling.FleetState([read["a"].cluster], list(classes.values())),
        scheduling.Owner(),
        scheduling.Cel(cel.evaluate, cel.compile),
    )
    assert result.placed == []
    assert result.message.endswith(f"cluster a: {why}")
