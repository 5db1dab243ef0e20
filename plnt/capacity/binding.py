"""What a ModelReplica asks for and whether the binder has committed it: the annotations the
ModelDeployment function (proposer), the binder (`plnt reconcile`) and the ModelReplica function
(renderer) share, and `verify`, the one check of a binding against the ledgers.

The ledger (plnt.capacity.ledger) is the only proof of a binding. The binder commits a replica
by writing an entry (its uid, digest and slots) into its cluster's ledger, a ConfigMap
`plnt-ledger-<cluster>` in `plnt-system` that only the binder may write; the ModelReplica
function requires that ConfigMap and renders a replica only when it holds an entry for exactly
this namespace, name, uid and digest (`verify`). The annotations below are the binder's
answers for people and for the ModelDeployment function; anything a tenant writes into them
makes nothing bound, and a binding annotation the ledger does not back is reported as forged,
replayed or stale. A ledger that cannot be read (plnt.capacity.ledger_parse) binds nothing and
unbinds nothing: whether a replica is bound is then unknown (`verify`).

- `plnt.work/pool-demand` (written by the ModelDeployment function): per pool, the pods the
  replica needs and what each asks of one node (`capacity.Pods`), as the scheduler counted it
  for its proposal. The binder never reads it: it sizes a commit from the spec and the pools'
  classes (`plnt.capacity.demand.replica_demand`), so a hand-written demand commits nothing it does
  not run.
- `plnt.work/binding` (written by the binder after its ledger commit succeeded): the replica and
  uid it was written for, the digest of what was committed and the (virtual) node of every pod.
  It tells the ModelDeployment what the binder answered; it is never what renders a replica.
- `plnt.work/binding-refused` (binder): the digest refused and why; the ModelDeployment
  function releases such a replica and places another.
- `plnt.work/over-committed` (binder): set while a bound replica no longer fits its pool (the
  pool or its class shrank after the commit); the ModelDeployment reports it.

The digest covers the whole spec but Crossplane's own references (`digest`): everything that
changes what runs, so a replica edited after its commit (an image, resources, copies, a pool) is
not bound any more.

Invariant: `verify` says Bound only when the cluster's ledger holds an entry for exactly the
replica's namespace, name, uid and digest and every quota ledger covering its namespace reserves
exactly it; nothing a tenant writes on its own objects changes the answer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from plnt import capacity, xp
from plnt.capacity import quotas
from plnt.capacity.ledger import Entry, Ledger

DEMAND = "plnt.work/pool-demand"
BINDING = "plnt.work/binding"
REFUSED = "plnt.work/binding-refused"
OVER_COMMITTED = "plnt.work/over-committed"
ANNOTATIONS = (DEMAND, BINDING, REFUSED, OVER_COMMITTED)

BOUND = "Bound"
PENDING = "Pending"
REFUSED_STATE = "Refused"
UNBACKED = "Unbacked"  # a binding annotation the ledger does not back (see `verify`)
UNKNOWN = "Unknown"  # a ledger it depends on cannot be read (see `verify`)

# Why a binding annotation is not honoured (the ModelReplica's Bound condition and a Warning)
BINDING_FORGED = "BindingForged"
BINDING_REPLAYED = "BindingReplayed"
BINDING_STALE = "BindingStale"

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
    # Whom the binder wrote it for ("<namespace>/<name>" and uid): a copy on another replica,
    # in another namespace or on a re-created one of the same name says so.
    replica: str = ""
    uid: str = ""
    slots: dict[str, list[list[Any]]]
    # The ledger's sequence when the entry was committed: a fleet view of that ledger sequence
    # or later counts the replica (0: committed before ledgers were numbered).
    ledger: int = 0


class RefusalRecord(_Strict):
    digest: str
    message: str


def devices_of(obj: Mapping[str, Any]) -> dict[str, int]:
    """The DRA devices a replica holds, per device class: every member's device requests times
    its pods (a Worker's nodes) times the engine's copies. What quotas count."""
    out: dict[str, int] = {}
    for engine in (obj.get("spec") or {}).get("engines") or []:
        copies = int(engine.get("copies") or 1)
        for m in engine.get("members") or []:
            pods = (
                int((m.get("worker") or {}).get("nodes") or 1) if m.get("role") == "Worker" else 1
            )
            for r in m.get("deviceRequests") or []:
                cls = str(r.get("deviceClassName") or "")
                out[cls] = out.get(cls, 0) + int(r.get("count") or 1) * pods * copies
    return out


@dataclasses.dataclass(frozen=True)
class State:
    state: str  # BOUND, PENDING, REFUSED_STATE, UNBACKED or UNKNOWN
    digest: str
    demand: Mapping[str, tuple[capacity.Pods, ...]]
    slots: Mapping[str, tuple[capacity.Slot, ...]] | None = None  # when bound
    message: str = ""  # refusal, why the binding annotation is not honoured, what is unreadable
    reason: str = (
        ""  # UNBACKED: BINDING_FORGED/_REPLAYED/_STALE; UNKNOWN: plnt.capacity.ledger_parse's
    )
    over_committed: str = ""
    ledger: int = 0  # when bound: the ledger sequence of the commit


def demand_of(obj: Mapping[str, Any]) -> dict[str, tuple[capacity.Pods, ...]]:
    """The demand the replica's proposer wrote: its annotation; else, for a replica made by
    hand, a whole node per pod of every member with device requests. What the ModelDeployment
    function counts for proposals not committed yet; the binder never reads it (it sizes a
    commit from the spec: plnt.capacity.demand)."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    raw = annotations.get(DEMAND)
    if raw:
        try:
            return capacity.demand_from_json(raw)
        except (ValueError, TypeError, KeyError):
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


def digest(obj: Mapping[str, Any]) -> str:
    """The digest of what the replica runs: its whole spec as the ModelReplica function reads it
    (cluster, every engine and member with its pool, device requests and pod template, serving,
    cache; defaults written out, so the API server's defaulting changes nothing), never
    Crossplane's own references. A commit holds this digest, so any later edit (an image,
    resources, copies) is not bound until the binder commits it again. A spec the function
    cannot read is digested as written (it renders nothing anyway)."""
    from plnt.models.model_replica import ModelReplicaSpec  # plnt.models stands on plnt.xp

    spec = {k: v for k, v in (obj.get("spec") or {}).items() if k != xp.CROSSPLANE_SPEC}
    try:
        read: Any = ModelReplicaSpec.model_validate(spec).dump()
    except ValidationError:
        read = spec
    body = json.dumps(read, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def state_of(obj: Mapping[str, Any], *, whole_spec: bool = True) -> State:
    """Bound (the binder committed exactly this), Refused (it refused exactly this) or
    Pending (anything else, including a binding for an earlier version of the replica).

    `whole_spec` False: `obj` was read without its pod templates (the scheduler's read of the
    whole fleet keeps only what capacity needs), so its digest cannot be computed, and the
    binder's answer is taken as about its current spec. Only for counting other teams'
    replicas in a proposal: what renders is decided by `verify`, on the whole object."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    demand = demand_of(obj)
    current = digest(obj) if whole_spec else _answered_digest(annotations)
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


def _answered_digest(annotations: Mapping[str, Any]) -> str:
    """The digest the binder's binding (else its refusal) annotation is about, or ''."""
    for key, model in ((BINDING, BindingRecord), (REFUSED, RefusalRecord)):
        raw = annotations.get(key)
        if raw:
            try:
                return str(model.model_validate_json(raw).digest)
            except (ValidationError, ValueError):
                continue
    return ""


class Unreadable(Protocol):
    """A ledger that cannot be read (plnt.capacity.ledger_parse.UnreadableLedgerError, which sits
    above this module): its reason and a message naming the ConfigMap and what is wrong with it."""

    reason: str

    @property
    def message(self) -> str: ...


def verify(
    obj: Mapping[str, Any],
    ledger: Ledger | Unreadable | None,
    quota_ledgers: Sequence[quotas.QuotaLedger] = (),
    unreadable_quotas: Sequence[Unreadable] = (),
) -> State:
    """What renders a replica: Bound only when `ledger` (its cluster's, as Crossplane read it)
    holds an entry for exactly this namespace/name, uid and digest; the slots are the ledger's.
    Else a binder's refusal, Pending, or, when a binding annotation claims what the ledger does
    not hold, Unbacked with the reason: forged (no such commit), replayed (written for another
    replica, namespace or an earlier replica of this name) or stale (for an earlier spec or
    another cluster). `quota_ledgers`: the quota ledgers; each covering the replica's namespace must
    reserve exactly it too (plnt.capacity.quotas), else it is not bound yet. None: no ledger,
    nothing committed on the cluster.

    Unknown (the reader's reason, the message naming each ConfigMap and what is wrong) when a
    ledger it depends on cannot be read: its cluster's ledger, or, for a replica that ledger
    commits, any of `unreadable_quotas` (which namespaces one covers is in what cannot be
    read). A readable ledger that does not commit the replica decides as usual."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace", "")
    key = f"{namespace}/{meta.get('name', '')}"
    uid = meta.get("uid", "") or ""
    cluster = (obj.get("spec") or {}).get("clusterName", "")
    claimed = state_of(obj)
    if ledger is not None and not isinstance(ledger, Ledger):
        return _unknown(claimed, [ledger])
    entry = ledger.entries.get(key) if ledger is not None else None
    if entry is not None and entry.uid == uid and entry.digest == claimed.digest:
        if unreadable_quotas:
            return _unknown(claimed, unreadable_quotas)
        return _committed(
            claimed, entry, _unreserved(quota_ledgers, namespace, key, uid, claimed.digest)
        )
    raw = ((meta.get("annotations") or {}).get(BINDING)) or ""
    if not raw:
        if claimed.state == REFUSED_STATE:
            return claimed
        return State(PENDING, claimed.digest, claimed.demand)
    reason, message = _unbacked(
        raw, entry, key=key, uid=uid, cluster=cluster, digest=claimed.digest
    )
    return State(UNBACKED, claimed.digest, claimed.demand, message=message, reason=reason)


def _unreserved(
    quota_ledgers: Sequence[quotas.QuotaLedger], namespace: str, key: str, uid: str, digest_: str
) -> list[str]:
    """The quota_ledgers covering the namespace that do not reserve exactly this replica."""
    return [
        q.quota
        for q in quota_ledgers
        if namespace in q.namespaces and not _reserves(q.entries.get(key), uid, digest_)
    ]


def _unknown(claimed: State, problems: Sequence[Unreadable]) -> State:
    return State(
        UNKNOWN,
        claimed.digest,
        claimed.demand,
        message="; ".join(p.message for p in problems),
        reason=problems[0].reason,
    )


def _committed(claimed: State, entry: Entry, unreserved: Sequence[str]) -> State:
    """A replica its cluster's ledger commits: Bound, unless a quota covering its namespace
    has not reserved it yet (then Pending, or the binder's refusal)."""
    if not unreserved:
        return State(
            BOUND,
            claimed.digest,
            claimed.demand,
            entry.parsed_slots(),
            over_committed=claimed.over_committed,
            ledger=entry.sequence,
        )
    if claimed.state == REFUSED_STATE:
        return claimed
    return State(
        PENDING,
        claimed.digest,
        claimed.demand,
        message=f"awaiting its reservation in InferenceQuota {', '.join(unreserved)}",
    )


def _unbacked(
    raw: str, entry: Entry | None, *, key: str, uid: str, cluster: str, digest: str
) -> tuple[str, str]:
    """Why a binding annotation the ledger does not back is not honoured: the reason (forged,
    replayed or stale) and the message, the most specific first."""
    where = f"the ledger of cluster {cluster}"
    try:
        record = BindingRecord.model_validate_json(raw)
    except (ValidationError, ValueError):
        return BINDING_FORGED, f"its {BINDING} annotation is not one the binder writes"
    if record.replica and record.replica != key:
        return (
            BINDING_REPLAYED,
            f"its {BINDING} annotation was written for {record.replica}, not {key}",
        )
    if entry is not None and entry.uid != uid:
        return (
            BINDING_REPLAYED,
            f"{where} holds {key} for an earlier replica of that name (uid {entry.uid})",
        )
    if record.uid and record.uid != uid:
        return (
            BINDING_REPLAYED,
            f"its {BINDING} annotation was written for an earlier {key} (uid {record.uid})",
        )
    if record.cluster != cluster:
        return (
            BINDING_STALE,
            f"its {BINDING} annotation binds it to cluster {record.cluster}, it is pinned to "
            f"{cluster}",
        )
    if entry is not None:
        return (
            BINDING_STALE,
            f"{where} committed digest {entry.digest}; its spec is now "
            f"{digest} (changed after the commit, awaiting the binder)",
        )
    if record.digest != digest:
        return (
            BINDING_STALE,
            f"its {BINDING} annotation is for digest {record.digest}, its spec is now "
            f"{digest}, and {where} holds no entry for {key}",
        )
    return (
        BINDING_FORGED,
        f"its {BINDING} annotation claims a commit {where} does not hold: no entry for {key}",
    )


def _reserves(r: quotas.Reservation | None, uid: str, digest_: str) -> bool:
    return r is not None and r.uid == uid and r.digest == digest_


def binding_json(
    digest_: str,
    cluster: str,
    slots: Mapping[str, tuple[capacity.Slot, ...]],
    ledger: int = 0,
    *,
    replica: str = "",
    uid: str = "",
) -> str:
    return BindingRecord(
        digest=digest_,
        cluster=cluster,
        slots=capacity.slots_json(slots),
        ledger=ledger,
        replica=replica,
        uid=uid,
    ).model_dump_json(exclude_defaults=True)


def refusal_json(digest_: str, message: str) -> str:
    return RefusalRecord(digest=digest_, message=message).model_dump_json()
