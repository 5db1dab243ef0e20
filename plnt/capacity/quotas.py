"""Quotas: how much the namespaces an InferenceQuota selects may hold together, fleet-wide.

An InferenceQuota (cluster-scoped) caps the devices, per DRA device class, that the namespaces
its `namespaceSelector` selects hold together (`spec.hard.devices`), and the bytes their
ModelCaches claim (`spec.hard.cacheStorage`, their `spec.size`). The binder keeps, per quota, a
quota ledger (`plnt-quota-<name>` in plnt-system, written by compare-and-swap like a cluster's
ledger, plnt.capacity.ledger): the namespaces it covered when written, its hard limits, and a
reservation per replica or cache it admitted (uid, digest, devices). Cache storage is reserved
in the same quota ledger as devices, under the key `CACHE_STORAGE`; a ModelCache composes its
volume only when every quota ledger capping cache storage in its namespace reserves it
(`cache_unreserved`).

Invariant: what a quota ledger reserves never sums past its `hard` limits. Reservations are
decided on that one object, so no interleaving of writers breaks it; a replica in a covered
namespace is bound only when its cluster's ledger commits it *and* every quota ledger covering
its namespace reserves it (`plnt.capacity.binding.verify`). `exceeds` is the one answer to "how much
may this namespace hold": the binder reserves by it and the ModelDeployment function proposes by it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from plnt import names, quantity

# A quota ledger counts a ModelCache's storage like a device class of its own: `hard` and each
# reservation name it by this key (not a DNS subdomain, so never a DRA device class's name), and
# a cache's reservation is keyed `<namespace>/modelcache:<name>` (":" is in no object's name,
# so it is never a replica's key).
CACHE_STORAGE = "cacheStorage"
CACHE_KEY_PREFIX = "modelcache:"
QUOTA_LEDGER_LABEL = "plnt.work/quota-ledger"
QUOTA_DATA_KEY = "quota.json"


class Reservation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    uid: str
    digest: str
    devices: dict[str, int]


class QuotaLedger(BaseModel):
    model_config = ConfigDict(extra="forbid")

    quota: str
    sequence: int = 0
    namespaces: list[str] = Field(default_factory=list)  # covered when written
    hard: dict[str, int] = Field(default_factory=dict)  # devices per device class
    entries: dict[str, Reservation] = Field(default_factory=dict)  # by "<namespace>/<name>"

    def used(self, namespaces: Sequence[str] | None = None) -> dict[str, int]:
        """Devices reserved per class (of `namespaces` only, when given)."""
        out: dict[str, int] = {}
        for key, r in self.entries.items():
            if namespaces is not None and key.split("/", 1)[0] not in namespaces:
                continue
            for cls, n in r.devices.items():
                out[cls] = out.get(cls, 0) + n
        return out


def quota_ledger_name(quota: str) -> str:
    return names.dns_subdomain("plnt-quota", quota)


def quota_ledger_configmap(state: QuotaLedger, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": quota_ledger_name(state.quota),
            "namespace": namespace,
            "labels": {QUOTA_LEDGER_LABEL: "true"},
        },
        "data": {QUOTA_DATA_KEY: state.model_dump_json(exclude_defaults=True)},
    }


def hold_message(namespaces: Sequence[str], used: Mapping[str, int], hard: Mapping[str, int],
                 cls: str, quota: str) -> str:  # fmt: skip
    """'namespace ml-team holds 16 of 16 gpu.nvidia.com (InferenceQuota ml-team)', and for cache
    storage '... holds 42949672960 of 53687091200 bytes of cache storage (...)'."""
    who = (
        f"namespace {namespaces[0]}"
        if len(namespaces) == 1
        else f"namespaces {', '.join(namespaces)}"
    )
    hold = "holds" if len(namespaces) == 1 else "hold"
    what = "bytes of cache storage" if cls == CACHE_STORAGE else cls
    return f"{who} {hold} {used.get(cls, 0)} of {hard.get(cls, 0)} {what} (InferenceQuota {quota})"


def cache_key(namespace: str, name: str) -> str:
    """A ModelCache's reservation key in a quota ledger."""
    return f"{namespace}/{CACHE_KEY_PREFIX}{name}"


def cache_bytes(size: Any) -> int:
    """A ModelCache's `spec.size` (bytes, or a quantity such as 40Gi) in bytes, rounded up; 0
    when it does not parse (the function refuses such a spec)."""
    try:
        value = quantity.parse_quantity(str(size)).value
    except (quantity.QuantityError, ValueError):
        return 0
    return max(math.ceil(value), 0)


def cache_digest(cluster: str, size: int) -> str:
    """What a cache's reservation is about: where it stages and how much it claims. A resize
    (or a move) is a new claim, reserved again."""
    return f"{cluster}:{size}"


def cache_unreserved(
    quotas: Sequence[QuotaLedger], namespace: str, name: str, *, uid: str, digest: str, size: int
) -> str:
    """Why a ModelCache may not claim its storage yet: a quota ledger capping cache storage in
    its namespace holds no reservation for exactly it (uid and digest); '' when every one does.
    Says how full the quota is when the cache does not fit it now."""
    key = cache_key(namespace, name)
    for q in quotas:
        if namespace not in q.namespaces or CACHE_STORAGE not in q.hard:
            continue
        held = q.entries.get(key)
        if held is not None and held.uid == uid and held.digest == digest:
            continue
        # what it held before (another size) is dropped when the binder weighs it again
        others = q.model_copy(update={"entries": {k: e for k, e in q.entries.items() if k != key}})
        return exceeds(others, {CACHE_STORAGE: size}, namespace) or (
            f"awaiting its reservation of {size} bytes in InferenceQuota {q.quota}"
        )
    return ""


def exceeds(
    state: QuotaLedger,
    devices: Mapping[str, int],
    namespace: str,
    pending: Sequence[Mapping[str, int]] = (),
) -> str:
    """Why reserving `devices` for a replica of `namespace` would exceed the quota after what its
    ledger reserves and `pending` (asks counted but not reserved yet), or ''. The one answer to
    "how much may this namespace hold": the binder reserves by it, and the ModelDeployment
    function proposes by it, its own proposals not reserved yet as `pending`."""
    used = state.used()
    for extra in pending:
        for cls, n in extra.items():
            used[cls] = used.get(cls, 0) + n
    for cls in sorted(devices):
        if cls in state.hard and used.get(cls, 0) + devices[cls] > state.hard[cls]:
            covered = [n for n in state.namespaces if n == namespace] or [namespace]
            if len(state.namespaces) > 1:
                covered = list(state.namespaces)
            return hold_message(covered, used, state.hard, cls, state.quota)
    return ""
