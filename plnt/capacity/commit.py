"""The commit decision, pure: which proposed ModelReplicas the binder commits to a cluster's
ledger, which it refuses, which committed ones no longer fit, and what each quota ledger
reserves. The binder (plnt_reconciler.binder) does the I/O around it; `plnt render` previews it.

The ledger (plnt.capacity.ledger: a ConfigMap per cluster, written only with its
resourceVersion as a precondition) is the one place capacity is committed: an entry per replica
holds its uid, the digest of what was committed and a slot (virtual node) per pod. A replica is
bound once its entry is in the ledger *and* the binder has copied the entry onto it
(`plnt.capacity.binding.BINDING`); the ModelReplica function renders workloads for bound
replicas only.

Invariant: the bound replicas of a cluster are always a subset of one ledger version whose slots
fit the pools. The annotation is written only after the ledger write succeeded, and the ledger
write succeeds only against the version it was computed from, so no interleaving of reconciles,
binders or restarts over-commits.

`decide` is called with a ledger read *before* the replica list it is given, so an entry whose
replica is not in the list was bound to a replica that existed before the list and is gone
(uids are never reused): its capacity is released.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from plnt import capacity, cluster_health
from plnt.capacity import admission, binding, demand, fleet_view, ledger, offer, quotas
from plnt.capacity.ledger import Entry, Ledger
from plnt.capacity.ledger_parse import UnreadableLedgerError
from plnt.capacity.tenant import Tenant


@dataclasses.dataclass(frozen=True)
class Replica:
    """A ModelReplica as the binder sees it."""

    namespace: str
    name: str
    uid: str
    created: str  # creationTimestamp: older proposals bind first
    cluster: str
    state: binding.State
    binding_annotation: str  # as it is on the object, to skip rewriting it
    refused_annotation: str
    over_annotation: str
    devices: Mapping[str, int] = dataclasses.field(default_factory=dict)  # per device class
    spec: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # what sizes a commit
    health_nudge: str = ""  # plnt.cluster_health.REPLICA_NUDGE as it is on the object

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @staticmethod
    def of_cache(obj: Mapping[str, Any]) -> Replica:
        """A ModelCache as quotas weigh it: its storage as a device class of its own
        (`quotas.CACHE_STORAGE`), under a key no replica has (`quotas.cache_key`). It is only
        ever given to `decide_quota`, never to a cluster's decision: a cache takes no device."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        cluster = str(spec.get("clusterName") or "")
        size = quotas.cache_bytes(spec.get("size"))
        return Replica(
            namespace=meta.get("namespace", ""),
            name=quotas.CACHE_KEY_PREFIX + meta.get("name", ""),
            uid=meta.get("uid", ""),
            created=meta.get("creationTimestamp", ""),
            cluster=cluster,
            state=binding.State(binding.PENDING, quotas.cache_digest(cluster, size), {}),
            binding_annotation="",
            refused_annotation="",
            over_annotation="",
            devices={quotas.CACHE_STORAGE: size},
        )

    def demand(self, pools: Mapping[str, capacity.Pool]) -> dict[str, tuple[capacity.Pods, ...]]:
        """What it asks of `pools` (its cluster's), from its spec alone (plnt.capacity.demand):
        never from the demand annotation its proposer, or anyone else, wrote."""
        return demand.replica_demand(self.spec, {name: p.shape for name, p in pools.items()})

    @staticmethod
    def of(obj: Mapping[str, Any]) -> Replica:
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        return Replica(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            created=meta.get("creationTimestamp", ""),
            cluster=(obj.get("spec") or {}).get("clusterName", ""),
            state=binding.state_of(obj),
            binding_annotation=annotations.get(binding.BINDING, ""),
            refused_annotation=annotations.get(binding.REFUSED, ""),
            over_annotation=annotations.get(binding.OVER_COMMITTED, ""),
            devices=binding.devices_of(obj),
            spec=obj.get("spec") or {},
            health_nudge=str(annotations.get(cluster_health.REPLICA_NUDGE, "")),
        )


@dataclasses.dataclass
class Decision:
    ledger: Ledger
    changed: bool  # the ledger must be written (with the read resourceVersion)
    # annotations to set on replicas once the ledger write succeeded: key -> {name: value|None}
    annotate: dict[str, dict[str, str | None]]
    bound: list[str]
    refused: dict[str, str]
    over: dict[str, str]


def decide(
    ledger: Ledger,
    replicas: Sequence[Replica],
    pools: Mapping[str, capacity.Pool],
    *,
    alive: set[str],
    refuse: Mapping[str, str] | None = None,
    first: frozenset[str] = frozenset(),
) -> Decision:
    """The next ledger for this cluster and what to write on its replicas.

    `replicas`: those whose spec.clusterName is this cluster; `alive`: the uids of every
    ModelReplica in the list (read after the ledger); `pools`: this cluster's pools, empty;
    `refuse`: replicas (by key) tenancy keeps off it and why (the cluster's fence, a quota):
    never committed, whatever their annotations say (an entry committed before is kept);
    `first`: proposals (by key) tried before the others, oldest first among themselves.
    """
    refuse = refuse or {}
    entries = dict(ledger.entries)
    committing = ledger.sequence + 1  # the sequence of the write, if this decision makes one
    changed = _release(entries, replicas, alive)

    # Nothing is adopted from a replica's own annotations: a binding the ledger does not hold
    # (forged, copied, or from a lost ledger) is a proposal like any other.

    accounts, over, full = _charged(entries, pools)
    # Where the pods of an over-committed replica really run is unknown (the virtual node that
    # went may not be the real one), so its pool takes nothing new until it fits again.
    for pool in full:
        accounts[pool] = _Closed(accounts[pool])

    refused: dict[str, str] = {}
    for r in sorted(replicas, key=lambda r: (r.key not in first, r.created, r.key)):
        if r.key in entries:
            continue
        if r.key in refuse:
            refused[r.key] = refuse[r.key]
            continue
        # A refused replica is tried again: until its ModelDeployment releases it, it waits.
        why, placed = _pack(accounts, r.demand(pools))
        if placed is None:
            refused[r.key] = why
            continue
        entries[r.key] = Entry(
            uid=r.uid,
            digest=r.state.digest,
            slots=capacity.slots_json(placed),
            sequence=committing,
            devices=dict(r.devices),
        )
        changed = True

    bound = [r.key for r in replicas if r.key in entries]
    annotate = _annotations(ledger.cluster, replicas, entries, refused, over)
    sequence = committing if changed else ledger.sequence
    return Decision(
        Ledger(cluster=ledger.cluster, sequence=sequence, entries=entries),
        changed,
        annotate,
        bound,
        refused,
        over,
    )


def _release(entries: dict[str, Entry], replicas: Sequence[Replica], alive: set[str]) -> bool:
    """Drops the entries whose replica is gone, was re-created, changed what it asks for or
    moved to another cluster (they hold nothing); whether any was dropped."""
    by_key = {r.key: r for r in replicas}
    changed = False
    for key, entry in list(entries.items()):
        r = by_key.get(key)
        stale = entry.uid not in alive or (
            r is not None and (r.uid != entry.uid or r.state.digest != entry.digest)
        )
        if stale or (r is None and entry.uid in alive):  # moved to another cluster
            del entries[key]
            changed = True
    return changed


def _annotations(
    cluster: str,
    replicas: Sequence[Replica],
    entries: Mapping[str, Entry],
    refused: Mapping[str, str],
    over: Mapping[str, str],
) -> dict[str, dict[str, str | None]]:
    """What to write on each replica once the ledger is: the binding of one it holds (and its
    over-commit), the refusal of one it refused; only what differs from what is there."""
    annotate: dict[str, dict[str, str | None]] = {}
    for r in replicas:
        held = entries.get(r.key)
        if held is not None:
            writes = _bound_annotations(cluster, r, held, over.get(r.key, ""))
        elif r.key in refused:
            value = binding.refusal_json(r.state.digest, refused[r.key])
            writes = {binding.REFUSED: value} if r.refused_annotation != value else {}
        else:
            writes = {}
        if writes:
            annotate[r.key] = writes
    return annotate


def _bound_annotations(
    cluster: str, r: Replica, held: Entry, over_message: str
) -> dict[str, str | None]:
    writes: dict[str, str | None] = {}
    value = binding.binding_json(
        held.digest, cluster, held.parsed_slots(), held.sequence, replica=r.key, uid=held.uid
    )
    if r.binding_annotation != value:
        writes[binding.BINDING] = value
    if r.refused_annotation:
        writes[binding.REFUSED] = None
    if r.over_annotation != over_message:
        writes[binding.OVER_COMMITTED] = over_message or None
    return writes


@dataclasses.dataclass
class QuotaDecision:
    ledger: quotas.QuotaLedger
    changed: bool  # the quota ledger must be written (with the read resourceVersion)
    refused: dict[str, str]  # replicas of covered namespaces it could not reserve, and why
    written: bool = True  # False: not what the ledger holds (its status is not written from it)


def quota_terms(obj: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """An InferenceQuota's namespace selector and hard limits: devices per device class, and
    cache storage in bytes (`quotas.CACHE_STORAGE`) when it caps it."""
    spec = obj.get("spec") or {}
    hard_spec = spec.get("hard") or {}
    hard = {str(k): int(v) for k, v in (hard_spec.get("devices") or {}).items()}
    if hard_spec.get("cacheStorage") is not None:
        hard[quotas.CACHE_STORAGE] = quotas.cache_bytes(hard_spec["cacheStorage"])
    return dict(spec.get("namespaceSelector") or {}), hard


def decide_quota(
    state: quotas.QuotaLedger,
    quota: Mapping[str, Any],
    replicas: Sequence[Replica],
    namespaces: Mapping[str, Mapping[str, str]],
    *,
    eligible: set[str],
) -> QuotaDecision:
    """The next quota ledger: reservations of replicas gone, re-created or changed are dropped;
    then the `eligible` replicas (by key: their cluster exists and admits them) of the covered
    namespaces are reserved oldest first while they fit `hard`. One object decides, so what it
    reserves never sums past `hard` whatever runs concurrently."""
    _, hard = quota_terms(quota)
    covering = covered(quota, replicas, namespaces)
    by_key = {r.key: r for r in replicas}
    entries = {
        k: e
        for k, e in state.entries.items()
        if (r := by_key.get(k)) is not None
        and r.uid == e.uid
        and r.state.digest == e.digest
        and r.namespace in covering
    }
    changed = entries != state.entries or covering != state.namespaces or hard != state.hard
    draft = quotas.QuotaLedger(
        quota=state.quota,
        sequence=state.sequence,
        namespaces=covering,
        hard=hard,
        entries=entries,
    )
    refused: dict[str, str] = {}
    for r in sorted(replicas, key=lambda r: (r.created, r.key)):
        if r.namespace not in covering or r.key in draft.entries or r.key not in eligible:
            continue
        why = quotas.exceeds(draft, r.devices, r.namespace)
        if why:
            refused[r.key] = why
            continue
        draft.entries[r.key] = quotas.Reservation(
            uid=r.uid, digest=r.state.digest, devices=dict(r.devices)
        )
        changed = True
    if changed:
        draft.sequence = state.sequence + 1
    return QuotaDecision(draft, changed, refused)


def tenancy_refusals(
    replicas: Sequence[Replica],
    clusters: Mapping[str, Mapping[str, Any]],
    namespaces: Mapping[str, Mapping[str, str]],
) -> dict[str, str]:
    """Replicas their cluster's fence (spec.namespaceSelector) keeps off it, and why."""
    out = {}
    for r in replicas:
        obj = clusters.get(r.cluster)
        if obj is None:
            continue
        fence = (obj.get("spec") or {}).get("namespaceSelector")
        if not _tenant(r.namespace, namespaces).admitted_by(fence):
            out[r.key] = admission.fence_message(r.cluster, r.namespace)
    return out


def quota_refusals(replicas: Sequence[Replica], decided: Sequence[QuotaDecision]) -> dict[str, str]:
    """Replicas a quota covering their namespace has not reserved, and why."""
    out: dict[str, str] = {}
    for r in replicas:
        for d in decided:
            if r.namespace not in d.ledger.namespaces:
                continue
            held = d.ledger.entries.get(r.key)
            if held is None or held.uid != r.uid or held.digest != r.state.digest:
                out.setdefault(
                    r.key,
                    d.refused.get(r.key)
                    or f"awaiting its reservation in InferenceQuota {d.ledger.quota}",
                )
    return out


def pools_of(
    cluster: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]]
) -> dict[str, capacity.Pool]:
    """The cluster's pools, empty, as the scheduler counts them (same reading of the status)."""
    parsed = offer.cluster_of(cluster)
    return {
        p.name: capacity.Pool(p.capacity, offer.class_shape(classes.get(p.class_name)))
        for p in parsed.pools
    }


def _charged(
    entries: Mapping[str, Entry], pools: Mapping[str, capacity.Pool]
) -> tuple[dict[str, capacity.Pool], dict[str, str], set[str]]:
    """Copies of the pools charged with every entry's slots in key order; the over-committed
    entries (why), and the pools where slots no longer fit (those slots are left out)."""
    accounts = {name: pool.copy() for name, pool in pools.items()}
    over: dict[str, str] = {}
    full: set[str] = set()
    for key in sorted(entries):
        for pool, slots in entries[key].parsed_slots().items():
            account = accounts.get(pool)
            if account is None:
                over[key] = f"pool {pool} is gone from the cluster"
                continue
            left = account.take(slots)
            if left:
                full.add(pool)
                over[key] = (
                    f"pool {pool}: {len(left)} of its {len(slots)} pods no longer fit "
                    f"({account.nodes} nodes of {_offers(account)} now)"
                )
    return accounts, over, full


def committed_pools(ledger: Ledger, pools: Mapping[str, capacity.Pool]) -> dict[str, capacity.Pool]:
    """The cluster's pools as `decide` charges them with the ledger's entries."""
    return _charged(ledger.entries, pools)[0]


def views(
    clusters: Mapping[str, Mapping[str, Any]],
    classes: Mapping[str, Mapping[str, Any]],
    committed: Mapping[str, Ledger],
    closed: Mapping[str, Closed] | None = None,
) -> list[fleet_view.ClusterView]:
    """The fleet view of every cluster as its ledger commits it (no ledger: nothing used); a
    `closed` cluster (its ledger cannot be read) offers nothing, says why, and keeps the last
    sequence counted (what tells a lost ledger from one never written)."""
    out = []
    for name, obj in clusters.items():
        shut = (closed or {}).get(name)
        if shut is not None:
            out.append(fleet_view.cluster_view(obj, {}, shut.sequence, closed=shut.message))
            continue
        held = committed.get(name) or Ledger(cluster=name)
        pools = committed_pools(held, pools_of(obj, classes))
        out.append(fleet_view.cluster_view(obj, pools, held.sequence))
    return out


# --- a ledger kept twice ----------------------------------------------------------------------
#
# Each ledger is two ConfigMaps in the binder's namespace, both written only by the binder: its
# record (`plnt-ledger-record-<cluster>`, `plnt-quota-record-<quota>`), which it decides from and
# writes first, and the published ledger (`plnt-ledger-<cluster>`, `plnt-quota-<quota>`), which
# the functions read and which is written second with the record's content. So the published
# ledger is always some version of the record, never ahead of it: entries leave the record only
# when their replica goes or changes, so a published ledger rebuilt from its record holds every
# replica the lost one held, and a record rebuilt from its published copy lacks only commits
# nobody has seen yet (never rendered, never annotated). A copy that does not read, or copies that
# contradict each other, close the cluster (or quota) until an operator repairs or deletes the
# damaged copy; both gone after the binder counted a commit also closes it.


class _Sequenced(Protocol):
    sequence: int


LedgerT = TypeVar("LedgerT", bound=_Sequenced)


# Why a cluster (or quota) is closed: the Event's reason.
LEDGER_DIVERGED = "LedgerDiverged"  # the copies contradict each other
LEDGER_LOST = "LedgerLost"  # both copies gone after the binder counted a commit


@dataclasses.dataclass(frozen=True)
class Copy(Generic[LedgerT]):
    """One of a ledger's ConfigMaps as read: its resourceVersion, and the ledger it holds or
    why it cannot be read (plnt.capacity.ledger_parse, the reading every reader shares)."""

    version: str
    read: LedgerT | UnreadableLedgerError


@dataclasses.dataclass(frozen=True)
class Closed:
    """Why nothing binds on a cluster (or in a quota's namespaces), and the last ledger sequence
    the binder counted there."""

    # a plnt.capacity.ledger_parse reason (a copy does not read), LEDGER_DIVERGED or LEDGER_LOST
    reason: str
    message: str
    sequence: int = 0
    # The replicas the copies that still read hold (None: no copy reads). A proposal outside it
    # was never published, so it can be refused; one that may be in a lost copy is left waiting,
    # since the ModelReplica function may be serving it.
    known: frozenset[str] | None = None


@dataclasses.dataclass(frozen=True)
class Held(Generic[LedgerT]):
    """A ledger as the binder holds it at the start of a decision."""

    state: LedgerT | None  # what to decide from; None when closed
    record: str | None  # the record's resourceVersion (None: create it)
    published: str | None  # the published copy's resourceVersion (None: create it)
    write_record: bool = False  # the record is gone: write it even if nothing changes
    publish: bool = False  # the published copy is gone or behind the record: write it
    closed: Closed | None = None
    rebuilt: str = ""  # what is being rebuilt from what (for people)
    forgotten: bool = False  # a lost ledger an operator chose to start again (empty)


def hold(
    fresh: LedgerT,
    published: Copy[LedgerT] | None,
    record: Copy[LedgerT] | None,
    *,
    names: tuple[str, str],
    counted: Callable[[], int] = lambda: 0,
) -> Held[LedgerT]:
    """How the binder may use a ledger from its two copies (`published`, then `record`, read in
    that order, so the record is never older than the published copy; None: not there).
    `fresh`: the empty ledger; `names`: the (published, record) ConfigMaps ("<namespace>/<name>");
    `counted()`: the highest sequence the binder is known to have written (its fleet view, a
    quota's status), which tells a lost ledger from a new one and is what a closed ledger keeps
    counting (asked only then)."""
    copies = _Copies.read(published, record, names, counted)
    if copies.errors:
        return copies.closed(copies.errors[0].reason, "; ".join(e.message for e in copies.errors))
    pub, rec = copies.published, copies.record
    if pub is None or rec is None:
        return copies.rebuilt(fresh)
    diverged = _divergence(pub, rec, names)
    if diverged:
        return copies.closed(LEDGER_DIVERGED, diverged)
    publish = pub.sequence < rec.sequence
    return Held(rec, copies.record_version, copies.published_version, publish=publish)


@dataclasses.dataclass(frozen=True)
class _Copies(Generic[LedgerT]):
    """A ledger's two copies as `hold` weighs them: the ledger each holds (None: gone or
    unreadable), their resourceVersions, and why the unreadable ones do not read."""

    published: LedgerT | None
    record: LedgerT | None
    published_version: str | None
    record_version: str | None
    errors: list[UnreadableLedgerError]
    names: tuple[str, str]
    counted: Callable[[], int]

    @staticmethod
    def read(
        published: Copy[LedgerT] | None,
        record: Copy[LedgerT] | None,
        names: tuple[str, str],
        counted: Callable[[], int],
    ) -> _Copies[LedgerT]:
        errors = [
            c.read
            for c in (published, record)
            if c is not None and isinstance(c.read, UnreadableLedgerError)
        ]
        return _Copies(
            _ledger_in(published),
            _ledger_in(record),
            published.version if published is not None else None,
            record.version if record is not None else None,
            errors,
            names,
            counted,
        )

    def closed(self, reason: str, message: str) -> Held[LedgerT]:
        """Closed, saying why: nothing binds. It keeps the last sequence counted and the
        replicas the readable copies hold."""
        readable = [p for p in (self.published, self.record) if p is not None]
        last = max([self.counted()] + [p.sequence for p in readable])
        known = frozenset(k for p in readable for k in _keys(p)) if readable else None
        text = f"{message}: nothing binds until it is repaired (docs/reconciler.md)"
        closed = Closed(reason, text, last, known)
        return Held(None, self.record_version, self.published_version, closed=closed)

    def rebuilt(self, fresh: LedgerT) -> Held[LedgerT]:
        """A copy is gone: rebuilt from the other; both gone, the ledger starts `fresh` unless
        the binder counted a commit already (then it is lost)."""
        published_name, record_name = self.names
        if self.record is not None:
            rebuilt = f"{published_name} from {record_name}"
            return Held(self.record, self.record_version, None, publish=True, rebuilt=rebuilt)
        if self.published is not None:
            rebuilt = f"{record_name} from {published_name}"
            version = self.published_version
            return Held(self.published, None, version, write_record=True, rebuilt=rebuilt)
        before = self.counted()
        if before > 0:
            return self.closed(
                LEDGER_LOST,
                f"ConfigMaps {published_name} and {record_name} are both gone, after the "
                f"binder committed sequence {before}: restore either from a backup",
            )
        return Held(fresh, None, None)


def _ledger_in(copy: Copy[LedgerT] | None) -> LedgerT | None:
    """The ledger a copy holds; None when it is gone or does not read."""
    if copy is None or isinstance(copy.read, UnreadableLedgerError):
        return None
    return copy.read


def _divergence(published: _Sequenced, record: _Sequenced, names: tuple[str, str]) -> str:
    """How the published copy contradicts the record ("" when it does not): ahead of it, or
    different at the same sequence."""
    if published.sequence > record.sequence:
        return (
            f"ConfigMap {names[0]} is at sequence {published.sequence}, ahead of the binder's "
            f"record {names[1]} at {record.sequence}"
        )
    if published.sequence == record.sequence and published != record:
        return (
            f"ConfigMap {names[0]} differs from the binder's record {names[1]} at the same "
            f"sequence {record.sequence}"
        )
    return ""


def refuse_closed(
    cluster: str, closed: Closed, replicas: Sequence[Replica]
) -> tuple[dict[str, str], dict[str, dict[str, str | None]]]:
    """On a cluster whose ledger cannot be read: every proposal is refused (why), and the
    refusal annotations to write. Those go only on proposals no copy of the ledger could hold:
    one a lost or unreadable copy may hold is left waiting, since the ModelReplica function may
    be serving it and a refusal would make its ModelDeployment delete it."""
    message = f"cluster {cluster}: {closed.message}"
    refused: dict[str, str] = {}
    annotate: dict[str, dict[str, str | None]] = {}
    for r in replicas:
        if r.cluster != cluster:
            continue
        refused[r.key] = message
        if closed.known is None or r.key in closed.known or r.state.state == binding.BOUND:
            continue
        value = binding.refusal_json(r.state.digest, message)
        if r.refused_annotation != value:
            annotate[r.key] = {binding.REFUSED: value}
    return refused, annotate


def closed_quota_refusals(
    quotas: Mapping[str, Mapping[str, Any]],
    closed: Mapping[str, Closed],
    replicas: Sequence[Replica],
    namespaces: Mapping[str, Mapping[str, str]],
) -> dict[str, str]:
    """Every replica of a namespace covered by an InferenceQuota whose ledger cannot be read:
    what it has reserved is unknown, so nothing new is committed there."""
    out: dict[str, str] = {}
    for name, why in sorted(closed.items()):
        cover = set(covered(quotas[name], replicas, namespaces))
        for r in replicas:
            if r.namespace in cover:
                out.setdefault(r.key, f"InferenceQuota {name}: {why.message}")
    return out


def _keys(state: Any) -> list[str]:
    return list(getattr(state, "entries", {}))


def covered(
    quota: Mapping[str, Any],
    replicas: Sequence[Replica],
    namespaces: Mapping[str, Mapping[str, str]],
) -> list[str]:
    """The namespaces an InferenceQuota covers now (its selector over their labels)."""
    selector, _ = quota_terms(quota)
    every = set(namespaces) | {r.namespace for r in replicas}
    return sorted(n for n in every if _tenant(n, namespaces).admitted_by(selector))


def _tenant(namespace: str, namespaces: Mapping[str, Mapping[str, str]]) -> Tenant:
    """A namespace as the binder lists it (its labels), for fences and quota selectors."""
    return Tenant.of(namespace, {"metadata": {"labels": dict(namespaces.get(namespace) or {})}})


def bind_all(
    clusters: Mapping[str, Mapping[str, Any]],
    classes: Mapping[str, Mapping[str, Any]],
    replicas: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, Ledger], list[dict[str, Any]]]:
    """A binder's pass in memory, from empty ledgers: the ledgers and the replicas with the
    annotations it would write (for benchmarks and tests that need a fleet already bound)."""
    parsed = [Replica.of(o) for o in replicas]
    alive = {r.uid for r in parsed}
    committed: dict[str, Ledger] = {}
    writes: dict[str, dict[str, str | None]] = {}
    by_cluster: dict[str, list[Replica]] = {}
    for r in parsed:
        by_cluster.setdefault(r.cluster, []).append(r)
    for name in sorted(clusters):
        decision = decide(
            Ledger(cluster=name),
            by_cluster.get(name, []),
            pools_of(clusters[name], classes),
            alive=alive,
        )
        committed[name] = decision.ledger
        writes.update(decision.annotate)
    out = []
    for obj, r in zip(replicas, parsed, strict=True):
        annotated = json.loads(json.dumps(obj))
        write_annotations(annotated, writes.get(r.key, {}))
        out.append(annotated)
    return committed, out


def write_annotations(obj: dict[str, Any], writes: Mapping[str, str | None]) -> None:
    """A decision's annotation writes on a ModelReplica, as its merge patch makes them (None
    removes)."""
    if not writes:
        return
    annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
    for key, value in writes.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value


@dataclasses.dataclass
class Preview:
    annotate: dict[str, dict[str, str | None]]  # keyed like `Decision.annotate`
    configmaps: list[dict[str, Any]]  # the cluster and quota ledgers as the binder would write


def preview(replicas: list[dict[str, Any]], required: list[dict[str, Any]]) -> Preview:
    """What a binder would write for `replicas` (new ones, as `plnt render` shows them), given
    the scenario's InferenceClusters, InferenceClasses, Namespaces, InferenceQuotas and other
    ModelReplicas (counted as holding what they ask, first): their annotations and the ledgers
    that commit them, which the ModelReplica function requires to render."""
    scenario = _Scenario.of(required)
    mine = [Replica.of(o) for o in replicas]
    decided, refuse = _preview_tenancy(scenario, mine)
    out: dict[str, dict[str, str | None]] = {}
    configmaps = [quotas.quota_ledger_configmap(d.ledger, ledger.LEDGER_NAMESPACE)
                  for d in decided]  # fmt: skip
    for name in sorted({r.cluster for r in mine} & set(scenario.clusters)):
        decision = _preview_cluster(scenario, name, mine, refuse)
        out.update(decision.annotate)
        configmaps.append(ledger.ledger_configmap(decision.ledger))
    return Preview(out, configmaps)


@dataclasses.dataclass(frozen=True)
class _Scenario:
    """What a preview reads of the scenario's required objects, by kind."""

    clusters: dict[str, dict[str, Any]]
    classes: dict[str, dict[str, Any]]
    namespaces: dict[str, Mapping[str, str]]  # name: labels
    inference_quotas: list[dict[str, Any]]
    others: list[Replica]  # the ModelReplicas there already

    @staticmethod
    def of(required: list[dict[str, Any]]) -> _Scenario:
        return _Scenario(
            clusters=_named(required, "InferenceCluster"),
            classes=_named(required, "InferenceClass"),
            namespaces={
                name: (o["metadata"].get("labels") or {})
                for name, o in _named(required, "Namespace").items()
            },
            inference_quotas=[o for o in required if o.get("kind") == "InferenceQuota"],
            others=[Replica.of(o) for o in required if o.get("kind") == "ModelReplica"],
        )


def _preview_tenancy(
    scenario: _Scenario, mine: list[Replica]
) -> tuple[list[QuotaDecision], dict[str, str]]:
    """The quotas decided, and the new replicas tenancy refuses (a fence, a quota), and why."""
    fenced = tenancy_refusals(mine, scenario.clusters, scenario.namespaces)
    everyone = [*scenario.others, *mine]
    eligible = {r.key for r in everyone if r.cluster in scenario.clusters} - set(fenced)
    decided = _preview_quotas(
        scenario.inference_quotas, scenario.others, mine, scenario.namespaces, eligible
    )
    return decided, {**quota_refusals(mine, decided), **fenced}


def _preview_cluster(
    scenario: _Scenario, name: str, mine: list[Replica], refuse: Mapping[str, str]
) -> Decision:
    """One cluster's decision on the new replicas, from an empty ledger, with its other
    replicas charged first."""
    pools = pools_of(scenario.clusters[name], scenario.classes)
    _hold_others(pools, [r for r in scenario.others if r.cluster == name])
    here = [r for r in mine if r.cluster == name]
    return decide(Ledger(cluster=name), here, pools, alive={r.uid for r in here}, refuse=refuse)


def _preview_quotas(
    quota_ledgers: list[dict[str, Any]],
    others: list[Replica],
    mine: list[Replica],
    namespaces: Mapping[str, Mapping[str, str]],
    eligible: set[str],
) -> list[QuotaDecision]:
    """Each quota decided from an empty ledger, by name: the other replicas first, then the
    new ones (as if created after every other)."""
    ordered = [*others, *(dataclasses.replace(r, created="~" + r.created) for r in mine)]
    return [
        decide_quota(
            quotas.QuotaLedger(quota=q["metadata"]["name"]),
            q,
            ordered,
            namespaces,
            eligible=eligible,
        )
        for q in sorted(quota_ledgers, key=lambda q: q["metadata"]["name"])
    ]


def _named(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o.get("kind") == kind}


def _hold_others(pools: Mapping[str, capacity.Pool], others: list[Replica]) -> None:
    """Charges a cluster's other replicas, committed ones first: exactly their slots; the
    others packed by their demand where it still fits."""
    for r in sorted(others, key=lambda r: (r.state.slots is None, r.key)):
        for pool, pods in r.demand(pools).items():
            if pool not in pools:
                continue
            if r.state.slots is not None:
                pools[pool].take(r.state.slots.get(pool, ()))
            else:
                pools[pool].pack_what_fits(pods)


def _pack(
    accounts: Mapping[str, capacity.Pool], demand: Mapping[str, tuple[capacity.Pods, ...]]
) -> tuple[str, dict[str, tuple[capacity.Slot, ...]] | None]:
    """Packs every pool of the demand or none; (why not, None) when one does not fit."""
    done: list[tuple[capacity.Pool, list[capacity.Slot]]] = []
    out: dict[str, tuple[capacity.Slot, ...]] = {}
    for pool in sorted(demand):
        account = accounts.get(pool)
        if account is None:
            return _undo(done, f"pool {pool} is not on the cluster")
        slots = account.pack(demand[pool])
        if slots is None:
            return _undo(done, f"pool {pool}: {account.shortfall(demand[pool])}")
        done.append((account, slots))
        out[pool] = tuple(slots)
    return "", out


def _undo(done: list[tuple[capacity.Pool, list[capacity.Slot]]], why: str) -> tuple[str, None]:
    for account, slots in done:
        account.release(slots)
    return why, None


class _Closed(capacity.Pool):
    """A pool that refuses every new pack, saying why."""

    def __init__(self, pool: capacity.Pool):
        self.__dict__.update(pool.copy().__dict__)

    def pack(self, pods: Sequence[capacity.Pods]) -> list[capacity.Slot] | None:
        return None

    def shortfall(self, pods: Sequence[capacity.Pods]) -> str:
        return "over-committed (it shrank after replicas were bound): nothing new binds"


def _offers(pool: capacity.Pool) -> str:
    parts = [f"{v} {capacity.describe(k)}" for k, v in pool.shape.offers]
    return ", ".join(parts) or "nothing"
