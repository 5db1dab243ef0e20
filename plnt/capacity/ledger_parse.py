"""Reading a ledger ConfigMap, and saying exactly what is wrong with one that does not read.

One parser for everyone who reads the binder's ledgers: the binder itself and the functions that
render or schedule on them. A ledger that cannot be read is never taken for an empty one (an
empty ledger means "nothing is bound here"; an unreadable one means "unknown"), so every failure
is a `UnreadableLedgerError` naming the ConfigMap, with a reason a condition can carry:

- `LedgerMissing`: there is no such ConfigMap;
- `LedgerCorrupt`: its data is not JSON (a truncated write, a typo);
- `LedgerMalformed`: JSON, but not a ledger (unknown or missing fields, wrong types), or it has
  no data under the ledger's key, or it does not carry the ledger's label;
- `LedgerMisplaced`: the ledger of another cluster or quota, or a ConfigMap of that name outside
  the binder's namespace;
- `LedgerWrongSequence`: its numbers contradict each other (a negative sequence, or an entry
  committed at a later sequence than the ledger's own).

Pure: no I/O. Objects are ConfigMaps as dicts (what Crossplane resolves) or their parts;
`require_quota_ledgers` asks Crossplane for the quota ledgers a function reads.

Invariant: every reader gets either the ledger the ConfigMap holds, or an
`UnreadableLedgerError` with a reason; never an empty ledger in place of one that does not read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from pydantic import BaseModel, ValidationError

from plnt import xp
from plnt.capacity import ledger, quotas

LEDGER_MISSING = "LedgerMissing"
LEDGER_CORRUPT = "LedgerCorrupt"
LEDGER_MALFORMED = "LedgerMalformed"
LEDGER_MISPLACED = "LedgerMisplaced"
LEDGER_WRONG_SEQUENCE = "LedgerWrongSequence"


class UnreadableLedgerError(ValueError):
    """A ledger ConfigMap that does not read as the ledger it is named for."""

    def __init__(self, configmap: str, reason: str, problem: str) -> None:
        self.configmap = configmap  # "<namespace>/<name>"
        self.reason = reason
        self.problem = problem  # what is wrong, after the ConfigMap's name
        super().__init__(f"ConfigMap {configmap} {problem}")

    @property
    def message(self) -> str:
        return str(self)


def _json(text: str | None, configmap: str, key: str) -> Any:
    if not text:
        raise UnreadableLedgerError(configmap, LEDGER_MALFORMED, f"has no data under {key}")
    try:
        return json.loads(text)
    except ValueError as err:
        raise UnreadableLedgerError(configmap, LEDGER_CORRUPT, f"is not JSON ({err})") from None


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "the document"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}"


_Ledger = TypeVar("_Ledger", bound=BaseModel)


def _validated(model: type[_Ledger], raw: Any, configmap: str, what: str) -> _Ledger:
    """`raw` read as `model`, or the first schema error, naming the ConfigMap."""
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise UnreadableLedgerError(
            configmap, LEDGER_MALFORMED, f"is not {what}: {_first_error(err)}"
        ) from None


def _non_negative(sequence: int, configmap: str) -> None:
    if sequence < 0:
        raise UnreadableLedgerError(
            configmap, LEDGER_WRONG_SEQUENCE, f"has a negative sequence {sequence}"
        )


def parse_cluster_ledger(text: str | None, cluster: str, configmap: str) -> ledger.Ledger:
    """The ledger of `cluster` from the JSON text stored in `configmap` ("<namespace>/<name>")."""
    raw = _json(text, configmap, ledger.LEDGER_DATA_KEY)
    parsed = _validated(ledger.Ledger, raw, configmap, "a ledger")
    if parsed.cluster != cluster:
        raise UnreadableLedgerError(
            configmap,
            LEDGER_MISPLACED,
            f"is the ledger of cluster {parsed.cluster!r}, not of {cluster!r}",
        )
    _non_negative(parsed.sequence, configmap)
    for key, entry in sorted(parsed.entries.items()):
        if entry.sequence > parsed.sequence or entry.sequence < 0:
            raise UnreadableLedgerError(
                configmap,
                LEDGER_WRONG_SEQUENCE,
                f"holds {key} committed at sequence {entry.sequence}, but the ledger is at "
                f"sequence {parsed.sequence}",
            )
    return parsed


def parse_quota_ledger(text: str | None, quota: str, configmap: str) -> quotas.QuotaLedger:
    """The quota ledger of InferenceQuota `quota` from the JSON text stored in `configmap`."""
    raw = _json(text, configmap, quotas.QUOTA_DATA_KEY)
    parsed = _validated(quotas.QuotaLedger, raw, configmap, "a quota ledger")
    if parsed.quota != quota:
        raise UnreadableLedgerError(
            configmap,
            LEDGER_MISPLACED,
            f"is the quota ledger of InferenceQuota {parsed.quota!r}, not of {quota!r}",
        )
    _non_negative(parsed.sequence, configmap)
    return parsed


def _find(
    configmaps: Sequence[Mapping[str, Any]], name: str, namespace: str, label: str
) -> Mapping[str, Any]:
    """The ConfigMap called `name` in `namespace` carrying `label`, or why there is none."""
    where = f"{namespace}/{name}"
    elsewhere = None
    for cm in configmaps:
        meta = cm.get("metadata") or {}
        if meta.get("name") != name:
            continue
        if meta.get("namespace") != namespace:
            elsewhere = f"{meta.get('namespace', '')}/{name}"
            continue
        if (meta.get("labels") or {}).get(label) != "true":
            raise UnreadableLedgerError(where, LEDGER_MALFORMED, f"is not labelled {label}=true")
        return cm
    if elsewhere is not None:
        raise UnreadableLedgerError(
            elsewhere, LEDGER_MISPLACED, f"is not in the binder's namespace {namespace}"
        )
    raise UnreadableLedgerError(where, LEDGER_MISSING, "does not exist")


def cluster_ledger_of(
    configmaps: Sequence[Mapping[str, Any]],
    cluster: str,
    namespace: str = ledger.LEDGER_NAMESPACE,
) -> ledger.Ledger:
    """The ledger of `cluster` among the ConfigMaps Crossplane resolved; raises
    `UnreadableLedgerError` (its reason and message) when it is missing or does not read."""
    name = ledger.ledger_name(cluster)
    cm = _find(configmaps, name, namespace, ledger.LEDGER_LABEL)
    text = (cm.get("data") or {}).get(ledger.LEDGER_DATA_KEY)
    return parse_cluster_ledger(text, cluster, f"{namespace}/{name}")


def quota_ledger_of(
    configmaps: Sequence[Mapping[str, Any]],
    quota: str,
    namespace: str = ledger.LEDGER_NAMESPACE,
) -> quotas.QuotaLedger:
    """The quota ledger of InferenceQuota `quota` among resolved ConfigMaps; raises
    `UnreadableLedgerError` when it is missing or does not read."""
    name = quotas.quota_ledger_name(quota)
    cm = _find(configmaps, name, namespace, quotas.QUOTA_LEDGER_LABEL)
    text = (cm.get("data") or {}).get(quotas.QUOTA_DATA_KEY)
    return parse_quota_ledger(text, quota, f"{namespace}/{name}")


def quota_ledgers_in(
    configmaps: Sequence[Mapping[str, Any]], namespace: str = ledger.LEDGER_NAMESPACE
) -> tuple[list[quotas.QuotaLedger], list[UnreadableLedgerError]]:
    """Every quota ledger among the ConfigMaps labelled as one in `namespace` (what a reader
    that requires them by label gets), and what is wrong with each of the others: one that does
    not read says nothing about which namespaces it covers, so a reader must not take it for
    no quota."""
    out: list[quotas.QuotaLedger] = []
    bad: list[UnreadableLedgerError] = []
    for cm in configmaps:
        meta = cm.get("metadata") or {}
        if (
            meta.get("namespace") != namespace
            or (meta.get("labels") or {}).get(quotas.QUOTA_LEDGER_LABEL) != "true"
        ):
            continue
        name = str(meta.get("name") or "")
        where = f"{namespace}/{name}"
        text = (cm.get("data") or {}).get(quotas.QUOTA_DATA_KEY)
        try:
            raw = _json(text, where, quotas.QUOTA_DATA_KEY)
            claimed = raw.get("quota") if isinstance(raw, dict) else None
            quota = claimed if isinstance(claimed, str) else ""
            parsed = parse_quota_ledger(text, quota, where)
            if name != quotas.quota_ledger_name(parsed.quota):
                raise UnreadableLedgerError(
                    where,
                    LEDGER_MISPLACED,
                    f"holds the quota ledger of InferenceQuota {parsed.quota!r}, which is "
                    f"kept in {quotas.quota_ledger_name(parsed.quota)}",
                )
        except UnreadableLedgerError as err:
            bad.append(err)
            continue
        out.append(parsed)
    return out, bad


QUOTA_LEDGERS_REQUIREMENT = "quota-ledgers"


def require_quota_ledgers(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse
) -> list[dict[str, Any]] | None:
    """The binder's quota ledgers, which both the scheduler and the renderer check a
    placement against; None until Crossplane answered."""

    return xp.require(
        req,
        rsp,
        QUOTA_LEDGERS_REQUIREMENT,
        "v1",
        "ConfigMap",
        match_labels={quotas.QUOTA_LEDGER_LABEL: "true"},
        namespace=ledger.LEDGER_NAMESPACE,
    )
