"""The one ledger parser (plnt.capacity.ledger_parse): every way a ledger ConfigMap does not read is
an error naming the ConfigMap and what is wrong, never an empty ledger."""

from __future__ import annotations

import pytest

from plnt.capacity import ledger, ledger_parse, quotas
from plnt.capacity.ledger_parse import UnreadableLedgerError

GOOD = ledger.Ledger(
    cluster="a",
    sequence=3,
    entries={"ns/r": ledger.Entry(uid="u1", digest="d1", slots={"h": [[0, 1, {}]]}, sequence=2)},
)


def configmap(text: str | None, *, name: str = "plnt-ledger-a", namespace: str = "plnt-system",
              labels: dict | None = None) -> dict:  # fmt: skip
    data = {} if text is None else {ledger.LEDGER_DATA_KEY: text}
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {ledger.LEDGER_LABEL: "true"} if labels is None else labels,
        },
        "data": data,
    }


def unreadable(configmaps: list[dict]) -> UnreadableLedgerError:
    with pytest.raises(UnreadableLedgerError) as caught:
        ledger_parse.cluster_ledger_of(configmaps, "a")
    return caught.value


def test_a_good_ledger_reads() -> None:
    assert ledger_parse.cluster_ledger_of([configmap(GOOD.model_dump_json())], "a") == GOOD


@pytest.mark.parametrize(
    ("configmaps", "reason", "message"),
    [
        ([], ledger_parse.LEDGER_MISSING, "ConfigMap plnt-system/plnt-ledger-a does not exist"),
        (
            [configmap(GOOD.model_dump_json()[:40])],
            ledger_parse.LEDGER_CORRUPT,
            "ConfigMap plnt-system/plnt-ledger-a is not JSON (Unterminated string starting at: "
            "line 1 column 40 (char 39))",
        ),
        (
            [configmap(None)],
            ledger_parse.LEDGER_MALFORMED,
            "ConfigMap plnt-system/plnt-ledger-a has no data under ledger.json",
        ),
        (
            [configmap('{"cluster": "a", "entries": {"ns/r": {"uid": "u1"}}}')],
            ledger_parse.LEDGER_MALFORMED,
            "ConfigMap plnt-system/plnt-ledger-a is not a ledger: entries.ns/r.digest: Field "
            "required (and 1 more)",
        ),
        (
            [configmap('{"cluster": "a", "owner": "me"}')],
            ledger_parse.LEDGER_MALFORMED,
            "ConfigMap plnt-system/plnt-ledger-a is not a ledger: owner: Extra inputs are not "
            "permitted",
        ),
        (
            [configmap(GOOD.model_dump_json(), labels={})],
            ledger_parse.LEDGER_MALFORMED,
            "ConfigMap plnt-system/plnt-ledger-a is not labelled plnt.work/ledger=true",
        ),
        (
            [configmap(GOOD.model_copy(update={"cluster": "b"}).model_dump_json())],
            ledger_parse.LEDGER_MISPLACED,
            "ConfigMap plnt-system/plnt-ledger-a is the ledger of cluster 'b', not of 'a'",
        ),
        (
            [configmap(GOOD.model_dump_json(), namespace="team-a")],
            ledger_parse.LEDGER_MISPLACED,
            "ConfigMap team-a/plnt-ledger-a is not in the binder's namespace plnt-system",
        ),
        (
            [configmap(GOOD.model_copy(update={"sequence": 1}).model_dump_json())],
            ledger_parse.LEDGER_WRONG_SEQUENCE,
            "ConfigMap plnt-system/plnt-ledger-a holds ns/r committed at sequence 2, but the "
            "ledger is at sequence 1",
        ),
        (
            [configmap('{"cluster": "a", "sequence": -4}')],
            ledger_parse.LEDGER_WRONG_SEQUENCE,
            "ConfigMap plnt-system/plnt-ledger-a has a negative sequence -4",
        ),
    ],
    ids=["missing", "bad JSON", "no data", "wrong shape", "unknown field", "no label",
         "another cluster's", "wrong namespace", "entry after the ledger", "negative sequence"],
)  # fmt: skip
def test_every_unreadable_shape_names_the_configmap_and_the_fault(
    configmaps: list[dict], reason: str, message: str
) -> None:
    err = unreadable(configmaps)
    assert (err.reason, err.message) == (reason, message)


def test_a_namespaced_copy_does_not_shadow_the_real_one() -> None:
    """A tenant's ConfigMap of the same name elsewhere is skipped when the real one is there."""
    real = configmap(GOOD.model_dump_json())
    fake = configmap(ledger.Ledger(cluster="a").model_dump_json(), namespace="team-a")
    assert ledger_parse.cluster_ledger_of([fake, real], "a") == GOOD


def quota_cm(text: str, name: str = "plnt-quota-q") -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "plnt-system",
            "labels": {quotas.QUOTA_LEDGER_LABEL: "true"},
        },
        "data": {quotas.QUOTA_DATA_KEY: text},
    }


def test_quota_ledgers_read_with_what_is_wrong_with_each_other_one() -> None:
    good = quotas.QuotaLedger(quota="q", sequence=1, namespaces=["a"], hard={"gpu": 4})
    other = quotas.QuotaLedger(quota="r").model_dump_json()
    found, bad = ledger_parse.quota_ledgers_in(
        [quota_cm(good.model_dump_json()), quota_cm("{oops", "plnt-quota-x"),
         quota_cm(other, "plnt-quota-y")]
    )  # fmt: skip
    assert found == [good]
    assert [(b.reason, b.message) for b in bad] == [
        (
            ledger_parse.LEDGER_CORRUPT,
            "ConfigMap plnt-system/plnt-quota-x is not JSON (Expecting property name enclosed "
            "in double quotes: line 1 column 2 (char 1))",
        ),
        (
            ledger_parse.LEDGER_MISPLACED,
            "ConfigMap plnt-system/plnt-quota-y holds the quota ledger of InferenceQuota 'r', "
            "which is kept in plnt-quota-r",
        ),
    ]
    assert ledger_parse.quota_ledger_of([quota_cm(good.model_dump_json())], "q") == good
    with pytest.raises(UnreadableLedgerError, match="plnt-quota-q does not exist"):
        ledger_parse.quota_ledger_of([], "q")
