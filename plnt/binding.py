"""What a ModelReplica asks for and whether the binder has committed it: the annotations the
ModelDeployment function (proposer), the binder (`plnt reconcile`) and the ModelReplica function
(renderer) share.

- `plnt.work/pool-demand` (written by the ModelDeployment function): per pool, the pods the
  replica needs and what each asks of one node (`capacity.Pods`).
- `plnt.work/binding` (written by the binder after its ledger commit succeeded): the digest of
  what was committed and the (virtual) node of every pod. Only a replica whose binding digest
  equals the digest of its current spec and demand is bound; only a bound replica is rendered.
- `plnt.work/binding-refused` (binder): the digest refused and why; the ModelDeployment
  function releases such a replica and places another.
- `plnt.work/over-committed` (binder): set while a bound replica no longer fits its pool (the
  pool or its class shrank after the commit); the ModelDeployment reports it.

The digest covers everything capacity depends on (cluster, pools, device requests, roles,
worker nodes, copies, the demand), so a replica edited after its commit is not bound any more.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from plnt import capacity

DEMAND = "plnt.work/pool-demand"
LEGACY_NODES = "plnt.work/pool-nodes"  # before devices were counted: {pool: nodes}
BINDING = "plnt.work/binding"
REFUSED = "plnt.work/binding-refused"
OVER_COMMITTED = "plnt.work/over-committed"
ANNOTATIONS = (DEMAND, LEGACY_NODES, BINDING, REFUSED, OVER_COMMITTED)

BOUND = "Bound"
PENDING = "Pending"
REFUSED_STATE = "Refused"

# ModelDeployment condition reporting the binder's answers
REPLICAS_BOUND = "ReplicasBound"
AWAITING_BINDING = "AwaitingBinding"
BINDING_REFUSED = "BindingRefused"
OVER_COMMITTED_REASON = "OverCommitted"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BindingRecord(_Strict):
    digest: str
    cluster: str
    slots: dict[str, list[list[Any]]]
    # The ledger's sequence when the entry was committed: a fleet view of that ledger sequence
    # or later counts the replica (0: committed before ledgers were numbered).
    ledger: int = 0


class RefusalRecord(_Strict):
    digest: str
    message: str


@dataclasses.dataclass(frozen=True)
class State:
    state: str  # BOUND, PENDING or REFUSED_STATE
    digest: str
    demand: Mapping[str, tuple[capacity.Pods, ...]]
    slots: Mapping[str, tuple[capacity.Slot, ...]] | None = None  # when bound
    message: str = ""  # refusal
    over_committed: str = ""
    ledger: int = 0  # when bound: the ledger sequence of the commit


def demand_of(obj: Mapping[str, Any]) -> dict[str, tuple[capacity.Pods, ...]]:
    """The replica's demand: its annotation; else, for a replica placed before devices were
    counted or made by hand, a whole node per pod of every member with device requests."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    raw = annotations.get(DEMAND)
    if raw:
        try:
            return capacity.demand_from_json(raw)
        except (ValueError, TypeError, KeyError):
            pass
    legacy = annotations.get(LEGACY_NODES)
    if legacy:
        try:
            parsed = json.loads(legacy)
            return capacity.whole_nodes({str(k): int(v) for k, v in parsed.items()})
        except (ValueError, TypeError, AttributeError):
            pass
    nodes: dict[str, int] = {}
    for engine in (obj.get("spec") or {}).get("engines") or []:
        copies = int(engine.get("copies") or 1)
        for m in engine.get("members") or []:
            if m.get("deviceRequests"):
                pods = (m.get("worker") or {}).get("nodes") or 1 if m.get("role") == "Worker" else 1
                pool = m.get("nodePoolName", "")
                nodes[pool] = nodes.get(pool, 0) + int(pods) * copies
    return capacity.whole_nodes(nodes)


def digest(obj: Mapping[str, Any], demand: Mapping[str, tuple[capacity.Pods, ...]]) -> str:
    spec = obj.get("spec") or {}
    engines = [
        {
            "name": e.get("name"),
            "copies": int(e.get("copies") or 1),
            "members": [
                {
                    "role": m.get("role") or "Standalone",
                    "worker": m.get("worker"),
                    "pool": m.get("nodePoolName"),
                    "deviceRequests": m.get("deviceRequests"),
                }
                for m in e.get("members") or []
            ],
        }
        for e in spec.get("engines") or []
    ]
    body = json.dumps(
        {
            "cluster": spec.get("clusterName"),
            "engines": engines,
            "demand": json.loads(capacity.demand_json(demand)),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def state_of(obj: Mapping[str, Any]) -> State:
    """Bound (the binder committed exactly this), Refused (it refused exactly this) or
    Pending (anything else, including a binding for an earlier version of the replica)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    demand = demand_of(obj)
    current = digest(obj, demand)
    over = annotations.get(OVER_COMMITTED) or ""
    raw = annotations.get(BINDING)
    if raw:
        try:
            record = BindingRecord.model_validate_json(raw)
            slots = capacity.slots_from_json(record.slots)
        except (ValidationError, ValueError, TypeError):
            record = None
        if record is not None and record.digest == current:
            return State(BOUND, current, demand, slots, over_committed=over, ledger=record.ledger)
    raw = annotations.get(REFUSED)
    if raw:
        try:
            refusal = RefusalRecord.model_validate_json(raw)
        except ValidationError:
            refusal = None
        if refusal is not None and refusal.digest == current:
            return State(REFUSED_STATE, current, demand, message=refusal.message)
    return State(PENDING, current, demand)


def binding_json(
    digest_: str, cluster: str, slots: Mapping[str, tuple[capacity.Slot, ...]], ledger: int = 0
) -> str:
    return BindingRecord(
        digest=digest_, cluster=cluster, slots=capacity.slots_json(slots), ledger=ledger
    ).model_dump_json(exclude_defaults=True)


def refusal_json(digest_: str, message: str) -> str:
    return RefusalRecord(digest=digest_, message=message).model_dump_json()


def preview(obj: Mapping[str, Any]) -> str:
    """The binding annotation a binder would write on `obj` alone on its pools (whole nodes from
    node 0): for examples, tests and previews, never for capacity decisions."""
    state = state_of(obj)
    slots = {}
    for pool, pods in state.demand.items():
        account = capacity.Pool(sum(p.count for p in pods), capacity.Shape(()))
        slots[pool] = tuple(account.pack(pods) or ())
    return binding_json(state.digest, (obj.get("spec") or {}).get("clusterName", ""), slots)
