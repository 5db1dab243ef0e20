"""Unknown is not unbound: a ModelReplica whose ledger (its cluster's, or a quota ledger) cannot
be read keeps every composed resource as observed and says which ConfigMap is wrong; one that
never rendered stays unrendered; a ledger that can be read and does not commit the replica still
un-renders it.

Through the function's real run_function and Crossplane's requirement loop (`plnt render`'s),
on the examples model-replica-ready (serving: observed Objects), model-replica-qwen3-8b (never
rendered) and model-replica-ledger-unreadable (the ready replica's ledger cut in half). Each
case's whole response is in tests/functions/responses/model_replica/ (its name starting
`ledger-`); the tests named for a rule read the field it is about.
"""

from __future__ import annotations

import copy
import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_replica import fn
from plnt import xp
from plnt.capacity import binding, ledger, quotas
from plnt_host import render
from tests.functions import tables
from tests.support import binder_annotation, request

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
READY = render.load_scenario(EXAMPLES / "model-replica-ready")
FRESH = render.load_scenario(EXAMPLES / "model-replica-qwen3-8b")
CUT = render.load_scenario(EXAMPLES / "model-replica-ledger-unreadable")
LEDGER = "plnt-system/plnt-ledger-eks-l4"
QUOTA_LEDGER = "plnt-system/plnt-quota-ml-team"


def composed(rsp: fnv1.RunFunctionResponse) -> dict[str, dict[str, Any]]:
    return {name: xp.to_dict(r.resource) for name, r in rsp.desired.resources.items()}


def as_observed(observed: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What the function owns of each observed composed resource, by composition resource
    name: desiring exactly this changes nothing on the workload cluster."""
    return {
        o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]: {
            "apiVersion": o["apiVersion"],
            "kind": o["kind"],
            "metadata": {"name": o["metadata"]["name"]},
            "spec": o["spec"],
        }
        for o in observed
    }


def condition(rsp: fnv1.RunFunctionResponse, typ: str) -> fnv1.Condition:
    return next(c for c in rsp.conditions if c.type == typ)


def warnings(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]


def ledger_configmap(required: list[dict[str, Any]]) -> dict[str, Any]:
    return next(o for o in required if o["metadata"]["name"] == "plnt-ledger-eks-l4")


# --- each shape of an unreadable cluster ledger ---------------------------------------------


def _data(value: str) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    def change(cm: dict[str, Any]) -> dict[str, Any]:
        cm["data"][ledger.LEDGER_DATA_KEY] = value
        return cm

    return change


def _cut_in_half(cm: dict[str, Any]) -> dict[str, Any]:
    raw = cm["data"][ledger.LEDGER_DATA_KEY]
    cm["data"][ledger.LEDGER_DATA_KEY] = raw[: len(raw) // 2]
    return cm


def _sequence(value: int) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    def change(cm: dict[str, Any]) -> dict[str, Any]:
        state = ledger.Ledger.model_validate_json(cm["data"][ledger.LEDGER_DATA_KEY])
        state.sequence = value
        cm["data"][ledger.LEDGER_DATA_KEY] = state.model_dump_json()
        return cm

    return change


def _namespace(value: str) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    def change(cm: dict[str, Any]) -> dict[str, Any]:
        cm["metadata"]["namespace"] = value
        return cm

    return change


def _unlabelled(cm: dict[str, Any]) -> dict[str, Any]:
    del cm["metadata"]["labels"]
    return cm


def _deleted(cm: dict[str, Any]) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    damage: Callable[[dict[str, Any]], dict[str, Any] | None]
    reason: str  # plnt.capacity.ledger_parse's, the Bound condition's reason
    says: str  # what the problem says, after the ConfigMap's name
    missing: bool = False  # as Crossplane answers it, nothing: a never-rendered one awaits


SHAPES = [
    Shape(
        "bad JSON",
        _cut_in_half,
        "LedgerCorrupt",
        "is not JSON (Unterminated string starting at: line 1 column ",
    ),
    Shape("empty data", _data(""), "LedgerMalformed", "has no data under ledger.json"),
    Shape(
        "wrong schema: entries a list",
        _data('{"cluster": "eks-l4", "entries": []}'),
        "LedgerMalformed",
        "is not a ledger: entries: Input should be a valid dictionary",
    ),
    Shape(
        "wrong schema: not an object",
        _data("[1, 2]"),
        "LedgerMalformed",
        "is not a ledger: the document: Input should be a valid dictionary",
    ),
    Shape(
        "wrong schema: an entry without its uid",
        _data('{"cluster": "eks-l4", "entries": {"ml-team/x": {"digest": "d", "slots": {}}}}'),
        "LedgerMalformed",
        "is not a ledger: entries.ml-team/x.uid: Field required",
    ),
    Shape(
        "another cluster's ledger",
        _data('{"cluster": "lab-h100"}'),
        "LedgerMisplaced",
        "is the ledger of cluster 'lab-h100', not of 'eks-l4'",
    ),
    Shape(
        "wrong sequence: behind its entry",
        _sequence(0),
        "LedgerWrongSequence",
        "holds ml-team/qwen3-8b-eks-l4-0 committed at sequence 1, but the ledger is at sequence 0",
    ),
    Shape(
        "wrong sequence: negative",
        _sequence(-3),
        "LedgerWrongSequence",
        "has a negative sequence -3",
    ),
    Shape(
        "without the binder's label",
        _unlabelled,
        "LedgerMalformed",
        "is not labelled plnt.work/ledger=true",
    ),
    # Crossplane answers the requirement (by name, in plnt-system) with nothing: a ledger
    # written into another namespace is, to the function, a ledger that does not exist.
    Shape(
        "wrong namespace",
        _namespace("plnt-backup"),
        "LedgerMissing",
        "does not exist",
        missing=True,
    ),
    Shape("missing", _deleted, "LedgerMissing", "does not exist", missing=True),
]
IDS = [s.name for s in SHAPES]


def damaged(required: list[dict[str, Any]], shape: Shape) -> list[dict[str, Any]]:
    out = []
    for o in copy.deepcopy(required):
        if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == "plnt-ledger-eks-l4":
            changed = shape.damage(o)
            if changed is not None:
                out.append(changed)
        else:
            out.append(o)
    return out


def slug(name: str) -> str:
    return "-".join(name.replace(":", " ").replace("'", "").split()).lower()


def case(name: str, xr: dict[str, Any], required: list[dict[str, Any]], observed=()) -> tables.Case:
    return tables.Case(name, request(xr, observed), tuple(required))


def observed_but(name: str) -> list[dict[str, Any]]:
    """The ready replica's observed resources but the one of composition resource name `name`."""
    return [
        o
        for o in READY.observed
        if o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME] != name
    ]


# Something of another kind under a composed name (the function never made it).
IMPOSTOR = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {
        "name": "qwen3-8b-eks-l4-0-bcd71",
        "annotations": {xp.COMPOSITION_RESOURCE_NAME: "workload-qwen3-8b"},
    },
    "data": {},
}


def two_gpus(xr: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(xr)
    out["spec"]["engines"][0]["members"][0]["deviceRequests"][0]["count"] = 2
    return out


def binder_annotated(xr: dict[str, Any]) -> dict[str, Any]:
    """xr with the binder's own annotation, as it writes it when it commits xr."""
    out = copy.deepcopy(xr)
    out["metadata"]["annotations"] = {binding.BINDING: binder_annotation(out)}
    return out


def _without_entry(required: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(required)
    cm = ledger_configmap(out)
    state = ledger.Ledger.model_validate_json(cm["data"][ledger.LEDGER_DATA_KEY])
    state.entries.clear()
    state.sequence += 1
    cm["data"][ledger.LEDGER_DATA_KEY] = state.model_dump_json()
    return out


def quota_ledger(data: str, name: str = "plnt-quota-ml-team") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": ledger.LEDGER_NAMESPACE,
            "labels": {quotas.QUOTA_LEDGER_LABEL: "true"},
        },
        "data": {quotas.QUOTA_DATA_KEY: data},
    }


QUOTA_SHAPES = [
    (
        "bad JSON",
        quota_ledger('{"quota": "ml-team", "namespa'),
        "LedgerCorrupt",
        "is not JSON (Unterminated string",
    ),
    (
        "wrong schema",
        quota_ledger('{"quota": "ml-team", "hard": {"gpu.nvidia.com": "many"}}'),
        "LedgerMalformed",
        "is not a quota ledger: hard.gpu.nvidia.com: Input should be a valid integer",
    ),
    (
        "under another quota's name",
        quota_ledger('{"quota": "team-b"}'),
        "LedgerMisplaced",
        "holds the quota ledger of InferenceQuota 'team-b', which is kept in plnt-quota-team-b",
    ),
    (
        "wrong sequence",
        quota_ledger('{"quota": "ml-team", "sequence": -1}'),
        "LedgerWrongSequence",
        "has a negative sequence -1",
    ),
]


def reservation_missing() -> dict[str, Any]:
    """A readable quota ledger of ml-team that reserves nothing for the replica."""
    state = quotas.QuotaLedger(quota="ml-team", namespaces=["ml-team"], hard={"gpu.nvidia.com": 8})
    return quotas.quota_ledger_configmap(state, ledger.LEDGER_NAMESPACE)


TABLE = tables.Table(
    "model_replica",
    fn.run_function,
    (
        case("ledger-ready", READY.xr, READY.required, READY.observed),
        case("ledger-fresh", FRESH.xr, FRESH.required),
        *(
            case(
                f"ledger-serving-{slug(shape.name)}",
                READY.xr,
                damaged(READY.required, shape),
                READY.observed,
            )
            for shape in SHAPES
        ),
        *(
            case(f"ledger-fresh-{slug(shape.name)}", FRESH.xr, damaged(FRESH.required, shape))
            for shape in SHAPES
        ),
        case("ledger-kept-not-the-spec", two_gpus(READY.xr), CUT.required, READY.observed),
        case("ledger-partly-observed", READY.xr, CUT.required, observed_but("workload-qwen3-8b")),
        case(
            "ledger-impostor-beside-the-rest",
            READY.xr,
            CUT.required,
            [*observed_but("workload-qwen3-8b"), IMPOSTOR],
        ),
        case("ledger-impostor-alone", READY.xr, CUT.required, [IMPOSTOR]),
        case(
            "ledger-readable-without-entry",
            READY.xr,
            _without_entry(READY.required),
            READY.observed,
        ),
        case(
            "ledger-readable-binding-forged",
            binder_annotated(READY.xr),
            _without_entry(READY.required),
            READY.observed,
        ),
        case("ledger-readable-another-spec", two_gpus(READY.xr), READY.required, READY.observed),
        *(
            case(
                f"ledger-quota-serving-{slug(name)}",
                READY.xr,
                [*READY.required, cm],
                READY.observed,
            )
            for name, cm, _, _ in QUOTA_SHAPES
        ),
        case("ledger-quota-fresh-unreadable", FRESH.xr, [*FRESH.required, QUOTA_SHAPES[0][1]]),
        case(
            "ledger-quota-unreadable-cluster-without-entry",
            READY.xr,
            [*_without_entry(READY.required), QUOTA_SHAPES[0][1]],
            READY.observed,
        ),
        case(
            "ledger-quota-without-reservation",
            READY.xr,
            [*READY.required, reservation_missing()],
            READY.observed,
        ),
    ),
)
response = TABLE.response_named


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


def test_the_scenarios_are_bound_with_their_ledgers() -> None:
    # The baseline every case damages: both replicas render from their readable ledgers, and
    # the serving one desires exactly what it observes.
    for name in ("ledger-ready", "ledger-fresh"):
        assert condition(response(name), "Bound").status == fnv1.STATUS_CONDITION_TRUE
    rsp = response("ledger-ready")
    specs = {name: o["spec"] for name, o in composed(rsp).items()}
    assert specs == {name: o["spec"] for name, o in as_observed(READY.observed).items()}


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_a_serving_replica_keeps_every_composed_resource(shape: Shape) -> None:
    rsp = response(f"ledger-serving-{slug(shape.name)}")
    assert composed(rsp) == as_observed(READY.observed)
    assert all(r.ready == fnv1.READY_TRUE for r in rsp.desired.resources.values())
    assert rsp.desired.composite.ready != fnv1.READY_FALSE
    bound = condition(rsp, "Bound")
    assert (bound.status, bound.reason) == (fnv1.STATUS_CONDITION_UNKNOWN, shape.reason)
    assert bound.message.startswith(
        f"cannot tell whether its devices are committed on cluster eks-l4: ConfigMap {LEDGER} "
        f"{shape.says}"
    )
    assert bound.message.endswith("every composed resource is kept as it is until it can be read")
    assert warnings(rsp) == [f"binding unknown ({shape.reason}): {bound.message}"]
    ready = condition(rsp, "WorkloadsReady")
    assert (ready.status, ready.reason) == (fnv1.STATUS_CONDITION_TRUE, "Available")
    status = xp.to_dict(rsp.desired.composite.resource)["status"]
    assert status["engines"] == [{"name": "qwen3-8b", "copies": 1, "availableCopies": 1}]


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_a_replica_that_never_rendered_stays_unrendered(shape: Shape) -> None:
    rsp = response(f"ledger-fresh-{slug(shape.name)}")
    assert composed(rsp) == {}
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    bound = condition(rsp, "Bound")
    if shape.missing:
        # a cluster the binder has committed nothing to has no ledger yet: not bound
        assert (bound.status, bound.reason) == (fnv1.STATUS_CONDITION_FALSE, "AwaitingBinding")
        assert warnings(rsp) == []
        return
    assert (bound.status, bound.reason) == (fnv1.STATUS_CONDITION_UNKNOWN, shape.reason)
    assert f"ConfigMap {LEDGER} {shape.says}" in bound.message
    assert bound.message.endswith("nothing is composed until it can be read")
    assert warnings(rsp) == [f"binding unknown ({shape.reason}): {bound.message}"]
    assert condition(rsp, "WorkloadsReady").reason == shape.reason


def test_what_is_kept_is_what_was_observed_not_what_the_spec_now_asks() -> None:
    # Edited while its ledger cannot be read (two GPUs): nothing committed the edit, so the
    # observed resources stay exactly as they are and nothing new is composed.
    rsp = response("ledger-kept-not-the-spec")
    assert composed(rsp) == as_observed(READY.observed)
    rct = composed(rsp)["rct-qwen3-8b-standalone"]["spec"]["forProvider"]["manifest"]
    assert rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1


def test_a_partly_observed_replica_keeps_only_what_it_has() -> None:
    # Nothing is added from the spec either: a workload not observed yet is not created.
    observed = observed_but("workload-qwen3-8b")
    rsp = response("ledger-partly-observed")
    assert composed(rsp) == as_observed(observed)
    assert "workload-qwen3-8b" not in composed(rsp)
    ready = condition(rsp, "WorkloadsReady")
    assert (ready.status, ready.reason) == (fnv1.STATUS_CONDITION_FALSE, "Waiting")
    assert ready.message == (
        "engine qwen3-8b: 0/1 copies available (kept as they are while its ledger cannot be read)"
    )


def test_only_what_the_function_composes_is_kept() -> None:
    # Something of another kind under a composed name (the function never made it): never
    # applied again, and alone it is no evidence that the replica rendered.
    rsp = response("ledger-impostor-beside-the-rest")
    assert composed(rsp) == as_observed(observed_but("workload-qwen3-8b"))
    alone = response("ledger-impostor-alone")
    assert composed(alone) == {}
    assert condition(alone, "Bound").message.endswith("nothing is composed until it can be read")


# --- a readable ledger still decides ----------------------------------------------------------


def test_a_readable_ledger_without_its_entry_still_unrenders_a_serving_replica() -> None:
    rsp = response("ledger-readable-without-entry")
    assert composed(rsp) == {}
    bound = condition(rsp, "Bound")
    assert (bound.status, bound.reason) == (fnv1.STATUS_CONDITION_FALSE, "AwaitingBinding")


def test_a_forged_binding_on_a_readable_ledger_still_unrenders() -> None:
    # The binder's own annotation, left on a replica its ledger no longer commits: a tenant
    # writing it (or keeping it) must never keep a render.
    rsp = response("ledger-readable-binding-forged")
    assert composed(rsp) == {}
    assert condition(rsp, "Bound").reason == "BindingForged"
    assert len(warnings(rsp)) == 1 and "BindingForged" in warnings(rsp)[0]


def test_a_ledger_committing_another_spec_still_unrenders() -> None:
    rsp = response("ledger-readable-another-spec")
    assert composed(rsp) == {}
    assert condition(rsp, "Bound").status == fnv1.STATUS_CONDITION_FALSE


# --- quota ledgers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "reason", "says"),
    [(s[0], s[2], s[3]) for s in QUOTA_SHAPES],
    ids=[s[0] for s in QUOTA_SHAPES],
)
def test_an_unreadable_quota_ledger_keeps_a_serving_replica(
    name: str, reason: str, says: str
) -> None:
    rsp = response(f"ledger-quota-serving-{slug(name)}")
    assert composed(rsp) == as_observed(READY.observed)
    bound = condition(rsp, "Bound")
    assert (bound.status, bound.reason) == (fnv1.STATUS_CONDITION_UNKNOWN, reason)
    assert f"ConfigMap {QUOTA_LEDGER} {says}" in bound.message
    assert warnings(rsp) == [f"binding unknown ({reason}): {bound.message}"]


def test_an_unreadable_quota_ledger_renders_nothing_new() -> None:
    rsp = response("ledger-quota-fresh-unreadable")
    assert composed(rsp) == {}
    assert condition(rsp, "Bound").status == fnv1.STATUS_CONDITION_UNKNOWN


def test_an_unreadable_quota_ledger_does_not_bind_what_the_cluster_ledger_does_not() -> None:
    # The cluster's ledger is readable and commits nothing: not bound, whatever the quotas say.
    rsp = response("ledger-quota-unreadable-cluster-without-entry")
    assert composed(rsp) == {}
    assert condition(rsp, "Bound").reason == "AwaitingBinding"


def test_a_readable_quota_ledger_without_the_reservation_still_unrenders() -> None:
    rsp = response("ledger-quota-without-reservation")
    assert composed(rsp) == {}
    bound = condition(rsp, "Bound")
    assert (bound.status, bound.reason) == (fnv1.STATUS_CONDITION_FALSE, "AwaitingBinding")
    assert "awaiting its reservation in InferenceQuota ml-team" in bound.message


# --- the example, as `plnt render` shows it -------------------------------------------------


def test_the_example_renders_every_observed_resource_unchanged() -> None:
    out = render.render(CUT)
    by_name = {o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]: o for o in out.composed}
    observed = {o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]: o for o in CUT.observed}
    assert by_name.keys() == observed.keys()
    for name, seen in observed.items():
        assert {k: v for k, v in by_name[name].items() if k != "status"} == {
            k: v for k, v in seen.items() if k != "status"
        }, name
    conditions = {c["type"]: c for c in out.xr["status"]["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert (conditions["Bound"]["status"], conditions["Bound"]["reason"]) == (
        "Unknown",
        "LedgerCorrupt",
    )
    assert f"ConfigMap {LEDGER} is not JSON" in conditions["Bound"]["message"]
    assert out.xr["status"]["endpoint"] == "http://198.51.100.20/ml-team/qwen3-8b-eks-l4-0"
    assert [r["severity"] for r in out.results] == ["SEVERITY_WARNING"]
