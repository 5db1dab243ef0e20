"""The ledger model: what the binder has committed on one InferenceCluster, and where it keeps it.

A cluster's ledger is a ConfigMap `plnt-ledger-<cluster>` in `plnt-system` that only the binder
writes, always by compare-and-swap (the resourceVersion it read as a precondition): an entry per
committed ModelReplica, by "<namespace>/<name>", holding its uid, the digest of what was
committed, the (virtual) node of every pod (`capacity.Slot`) and the devices it holds per
device class (what quotas count). The binder decides what goes in (plnt.capacity.commit), the
ModelReplica function reads it to verify a binding (plnt.capacity.binding), everyone reads it
through plnt.capacity.ledger_parse, and the fleet view publishes what it counts
(plnt.capacity.fleet_view).

Invariant: the entries of one ledger version fit the cluster's pools with no node over its
devices, and `sequence` grows by one on every write, so an entry's `sequence` is never above its
ledger's and a reader can tell which ledger version counted a commit.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from plnt import capacity, names

# The ledger: where the binder keeps it, and how the ModelReplica function finds it.
LEDGER_NAMESPACE = "plnt-system"  # the binder's default namespace; tenants cannot write in it
LEDGER_LABEL = "plnt.work/ledger"
LEDGER_DATA_KEY = "ledger.json"


class Entry(BaseModel):
    """One committed replica in a cluster's ledger."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uid: str
    digest: str
    slots: dict[str, list[list[Any]]]
    sequence: int = 0  # the ledger's sequence when this entry was committed
    devices: dict[str, int] = Field(default_factory=dict)  # per device class (quotas)

    def parsed_slots(self) -> dict[str, tuple[capacity.Slot, ...]]:
        return capacity.slots_from_json(self.slots)


class Ledger(BaseModel):
    """A cluster's ledger: every replica committed to it, by "<namespace>/<name>"."""

    model_config = ConfigDict(extra="forbid")

    cluster: str
    # One more on every write (writes are compare-and-swap, so the sequence is the ledger's
    # history): a fleet view says which sequence it counted, a binding when it was committed.
    sequence: int = 0
    entries: dict[str, Entry] = Field(default_factory=dict)


def ledger_name(cluster: str) -> str:
    return names.dns_subdomain("plnt-ledger", cluster)


def ledger_configmap(state: Ledger, namespace: str = LEDGER_NAMESPACE) -> dict[str, Any]:
    """The ConfigMap the binder keeps `state` in."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": ledger_name(state.cluster),
            "namespace": namespace,
            "labels": {LEDGER_LABEL: "true"},
        },
        "data": {LEDGER_DATA_KEY: state.model_dump_json(exclude_defaults=True)},
    }
