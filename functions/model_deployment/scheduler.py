"""The fleet scheduler: where each replica of a ModelDeployment runs. Pure, no protobuf.

Inputs: the deployment's engines and cluster selector, every InferenceCluster, every
InferenceClass, and every ModelReplica already placed on the fleet. The function requires
ModelReplicas with an empty label selector and no namespace, which Crossplane answers
cluster-wide (a required-resources selector without a namespace matches namespaced resources
in every namespace), so capacity is counted across all deployments in all namespaces.

Matching. A device request matches an InferenceClass device when ``device.count`` covers the
request's count and every CEL selector is true on the device. Selectors are evaluated once per
distinct (expression, class, device) and the answer reused; a whole engine's fit on a class is
computed once per class. Everything that grows with the fleet afterwards is integer
bookkeeping over the nodes of each (cluster, pool) (`plnt.capacity.Pool`).

Cost, in devices and nodes: a member's pods are one per copy of a Standalone or Leader member,
``worker.nodes`` per copy of a Worker member. Each pod asks one node of the pool's class for
the devices of its requests (and, when the class declares ``nodeResources``, its CPU and
memory); a gang pod (Leader or Worker) takes a whole node. A member without a nodeSelector
costs nothing and lands on its engine's pool. A pool offers its ``status.pools[].nodeCapacity``
nodes (until the cluster reports pools, the spec's maxNodeCount, else nodeCount, which is what
it will report; fewer while fewer are Ready, `plnt.pool_nodes`), less what every placed
replica takes on them: the slots the binder committed for a bound one, its demand packed where
it fits for one not bound yet. A replica is placed only where every engine's pods pack in full:
never overcommitted.

Pins. A replica already placed stays on its cluster and pools while the cluster exists, Ready
or not (the function drops only its endpoint); a replica whose cluster is gone is released and
a new one placed in its stead, and so is one the binder refused, or has not bound yet while its
cluster's fence no longer admits the namespace. When there are more pins than wanted, replicas
on clusters that are not Ready are released first, then the highest-numbered.

Order (deterministic for the same inputs):
1. Candidate clusters match ``clusterSelector`` and are Ready.
2. Each new replica goes to the candidate cluster with, in this order: the fewest replicas of
   this deployment already on it, of any revision that stays (spread before doubling up); the
   fewest devices wasted by the replica there; the name.
3. Within a cluster, engines are placed in spec order; each engine takes the pool that, among
   pools whose class fits every member and with enough free nodes left for all its members,
   wastes the fewest devices, then by name. Waste = sum over requests of
   (device.count - request.count) x pods x copies. If a later engine then has no pool left, earlier
   engines try their next pools (depth first, bounded to SEARCH_BUDGET pools per cluster).
   An engine with no nodeSelector on any member goes to the pool of the first engine that has
   one (else the first pool by name) and costs nothing.
"""

from __future__ import annotations

import dataclasses
import heapq
import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from plnt import binding, capacity, conditions, labels, tenancy
from plnt import demand as demand_
from plnt.fleet import Cluster, Pool, class_shape
from plnt.models import model_deployment as models
from plnt.models.model_replica import Container

Evaluate = Callable[[str, dict], bool]
Compile = Callable[[str], object]

CLAIM_DRA = "DRA"
MAX_LISTED_CLUSTERS = 10
SEARCH_BUDGET = 512  # pools tried per (replica, cluster) when engines compete for pools

# reasons of the ReplicasScheduled condition
SCHEDULED = "Scheduled"
INSUFFICIENT_CAPACITY = "InsufficientCapacity"
INSUFFICIENT_QUOTA = "InsufficientQuota"  # set by the function: an InferenceQuota is full
NO_MATCHING_CLUSTERS = "NoMatchingClusters"
INVALID_NODE_SELECTOR = "InvalidNodeSelector"
TEMPLATE_NOT_PERMITTED = conditions.TEMPLATE_NOT_PERMITTED  # set by the function

_INDEX = re.compile(r"-(\d+)$")


# --- inputs -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Request:
    name: str
    count: int
    selectors: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Member:
    role: str
    pods: int  # pods per copy
    requests: tuple[Request, ...] | None  # None: no nodeSelector
    cpu: int = 0  # millicores per pod (its containers' requests, else limits)
    memory: int = 0  # bytes per pod

    @property
    def whole(self) -> bool:
        """Gang pods (Leader/Worker) take a whole node each."""
        return self.role in ("Leader", "Worker")


@dataclasses.dataclass(frozen=True)
class Engine:
    name: str
    copies: int
    members: tuple[Member, ...]

    @property
    def selective(self) -> bool:
        return any(m.requests is not None for m in self.members)


@dataclasses.dataclass(frozen=True)
class PlacedReplica:
    """A ModelReplica on the fleet, as far as capacity and pins are concerned."""

    namespace: str
    name: str
    deployment: str
    revision: str
    cluster: str
    pool_nodes: Mapping[str, int]  # the old accounting: nodes per pool
    engine_pools: tuple[tuple[str, str], ...]  # (engine, pool)
    demand: Mapping[str, tuple[capacity.Pods, ...]] | None = None  # None: whole pool_nodes
    slots: Mapping[str, tuple[capacity.Slot, ...]] | None = None  # committed by the binder
    state: str = binding.PENDING
    message: str = ""  # the binder's refusal
    over_committed: str = ""
    ledger: int = 0  # bound: the ledger sequence of the commit

    @property
    def needs(self) -> Mapping[str, tuple[capacity.Pods, ...]]:
        return self.demand if self.demand is not None else capacity.whole_nodes(self.pool_nodes)


# --- outputs ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MemberPlacement:
    pool: str
    device_requests: tuple[dict[str, Any], ...]  # DRA DeviceRequests, Synthetic dropped


@dataclasses.dataclass(frozen=True)
class EnginePlacement:
    name: str
    pool: str
    members: tuple[MemberPlacement, ...]


@dataclasses.dataclass(frozen=True)
class Placement:
    """A new replica: its cluster, each engine's pool and each member's device requests."""

    cluster: str
    engines: tuple[EnginePlacement, ...]
    pool_nodes: Mapping[str, int]  # nodes it would take in the old accounting (one per pod)
    demand: Mapping[str, tuple[capacity.Pods, ...]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Schedule:
    kept: list[PlacedReplica]  # held ones included: they stay composed and charged
    released: list[PlacedReplica]
    placed: list[Placement]
    wanted: int
    reason: str
    message: str
    # replicas past their failover grace period kept until their replacements serve
    held: list[PlacedReplica] = dataclasses.field(default_factory=list)

    @property
    def scheduled(self) -> bool:
        return self.reason == SCHEDULED

    @property
    def count(self) -> int:
        """The replicas that count toward `wanted`: kept and placed, not the held ones."""
        return len(self.kept) - len(self.held) + len(self.placed)


# --- parsing fleet objects ----------------------------------------------------------------


def engines_from(spec_engines: Sequence[models.Engine]) -> tuple[Engine, ...]:
    """The scheduler's view of a ModelDeployment's parsed `spec.engines`."""
    return tuple(
        Engine(e.name, e.copies, tuple(_member(m) for m in e.members)) for e in spec_engines
    )


def _member(member: models.DeploymentMember) -> Member:
    requests = None
    if member.node_selector is not None:
        requests = tuple(
            Request(d.name, d.count, tuple(s.cel for s in d.selectors))
            for d in member.node_selector.devices
        )
    cpu, memory = _pod_resources(member.template.containers)
    return Member(member.role, member.pods, requests, cpu, memory)


def _pod_resources(containers: Iterable[Container]) -> tuple[int, int]:
    """CPU (millicores) and memory (bytes) one pod of the member asks for (plnt.demand)."""
    return demand_.pod_resources(c.resources.dump() if c.resources else None for c in containers)


_LABEL = r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"{_LABEL}(\.{_LABEL})*")


def url_host(address: str) -> str | None:
    """An IP address or hostname as a URL host (IPv6 in brackets); None for anything else,
    which would make an endpoint URL that means something else or nothing."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address if len(address) <= 253 and _HOSTNAME.fullmatch(address) else None
    return f"[{ip}]" if ip.version == 6 else str(ip)


def placed_replica(obj: Mapping[str, Any], *, whole_spec: bool = True) -> PlacedReplica:
    """A ModelReplica as placed: its demand (plnt.binding.demand_of) and the binder's answer
    (`whole_spec` False: read without its pod templates, plnt.binding.state_of)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    obj_labels = meta.get("labels") or {}
    engine_pools = []
    for engine in spec.get("engines") or []:
        pool = next((m.get("nodePoolName", "") for m in engine.get("members") or []), "")
        engine_pools.append((engine.get("name", ""), pool))
    state = binding.state_of(obj, whole_spec=whole_spec)
    pool_nodes = {pool: sum(p.count for p in pods) for pool, pods in state.demand.items()}
    return PlacedReplica(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        deployment=obj_labels.get(labels.DEPLOYMENT, ""),
        revision=obj_labels.get(labels.REVISION, ""),
        cluster=spec.get("clusterName", ""),
        pool_nodes=pool_nodes,
        engine_pools=tuple(engine_pools),
        demand=state.demand,
        slots=state.slots,
        state=state.state,
        message=state.message,
        over_committed=state.over_committed,
        ledger=state.ledger,
    )


# --- matching engines to classes -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EngineFit:
    """How an engine's members fit one InferenceClass: per member, the device per request."""

    waste: int  # the old, whole-node waste: (device.count - request.count) x pods
    devices: tuple[tuple[Mapping[str, Any], ...] | None, ...]  # per member; None: no selector
    pods: tuple[capacity.Pods, ...]  # what the engine's pods ask of one node of the class


class Matcher:
    """Fits engines onto classes, evaluating each (expression, class, device) at most once."""

    def __init__(self, classes: Mapping[str, Mapping[str, Any]], evaluate: Evaluate):
        self.classes = classes
        self.evaluate = evaluate
        self._cel: dict[tuple[str, str, str], tuple[bool, str]] = {}
        self._fits: dict[tuple[int, str], EngineFit | str] = {}
        # Per expression: devices it was evaluated on, and the last error if it erred on all.
        self._tried: dict[str, int] = {}
        self._erred: dict[str, tuple[int, str]] = {}
        self._shapes: dict[str, capacity.Shape] = {}

    def shape(self, class_name: str) -> capacity.Shape:
        """What one node of the class offers (cached)."""
        hit = self._shapes.get(class_name)
        if hit is None:
            hit = class_shape(self.classes.get(class_name))
            self._shapes[class_name] = hit
        return hit

    def always_errs(self, expr: str) -> str | None:
        """The error of a selector that raised on every device it was tried on, else None: such
        a selector (a typo, `productNam`) is the problem, not the fleet's capacity."""
        erred = self._erred.get(expr)
        if erred is None or erred[0] < self._tried.get(expr, 0):
            return None
        return erred[1]

    def selector(self, expr: str, class_name: str, device: Mapping[str, Any]) -> tuple[bool, str]:
        key = (expr, class_name, device.get("name", ""))
        hit = self._cel.get(key)
        if hit is None:
            self._tried[expr] = self._tried.get(expr, 0) + 1
            try:
                hit = (bool(self.evaluate(expr, dict(device))), "")
            except Exception as err:  # a CEL runtime error on this device: no match
                hit = (False, f"selector error on device {key[2]}: {err}")
                count = self._erred.get(expr, (0, ""))[0] + 1
                self._erred[expr] = (count, hit[1])
            self._cel[key] = hit
        return hit

    def request(
        self, req: Request, class_name: str, devices: Sequence[Mapping[str, Any]]
    ) -> Mapping[str, Any] | str:
        """The matching device wasting the fewest devices (then by name), or why none does."""
        best = None
        why = []
        for dev in devices:
            count = int(dev.get("count") or 1)
            if count < req.count:
                why.append(f"device {dev.get('name')} has {count} per node, {req.count} requested")
                continue
            failed = ""
            for expr in req.selectors:
                ok, err = self.selector(expr, class_name, dev)
                if not ok:
                    failed = err or f"selector `{_short(expr)}` false on device {dev.get('name')}"
                    break
            if failed:
                why.append(failed)
                continue
            key = (count - req.count, dev.get("name", ""))
            if best is None or key < best[0]:
                best = (key, dev)
        if best is None:
            return f"request {req.name}: " + ("; ".join(why) or "class has no devices")
        return best[1]

    def fit(self, index: int, engine: Engine, class_name: str) -> EngineFit | str:
        """How engine `index` fits class `class_name` (cached), or why it does not."""
        key = (index, class_name)
        if key in self._fits:
            return self._fits[key]
        cls = self.classes.get(class_name)
        result: EngineFit | str
        if cls is None:
            result = f"InferenceClass {class_name!r} not found"
        else:
            devices = (cls.get("spec") or {}).get("devices") or []
            shape = self.shape(class_name)
            waste = 0
            per_member: list[tuple[Mapping[str, Any], ...] | None] = []
            pods: list[capacity.Pods] = []
            result = ""
            for member in engine.members:
                if member.requests is None:
                    per_member.append(None)
                    continue
                chosen = []
                demand: dict[str, int] = {}
                for req in member.requests:
                    dev = self.request(req, class_name, devices)
                    if isinstance(dev, str):
                        result = f"member {member.role} {dev}"
                        break
                    chosen.append(dev)
                    waste += (int(dev.get("count") or 1) - req.count) * member.pods * engine.copies
                    device = capacity.device_key(dev.get("name", ""))
                    if device in shape.synthetic:  # as the binder counts it from the spec
                        demand[device] = demand_.synthetic_charge(shape, device)
                    else:
                        demand[device] = demand.get(device, 0) + req.count
                if result:
                    break
                per_member.append(tuple(chosen))
                count = member.pods * engine.copies
                vector = demand_.pod_vector(demand, member.cpu, member.memory, shape)
                pods.append(capacity.Pods(count, vector, member.whole))
            if not result:
                result = EngineFit(waste, tuple(per_member), tuple(pods))
        self._fits[key] = result
        return result


def _short(expr: str, limit: int = 80) -> str:
    expr = " ".join(expr.split())
    return expr if len(expr) <= limit else expr[: limit - 3] + "..."


# --- placing ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Choice:
    waste: int  # devices left idle on the nodes it opens
    static: int  # the whole-node waste of its classes: a tie goes to the smaller nodes
    pools: list[tuple[Pool, EngineFit | None]]  # per engine


class _Accounts:
    """Per (cluster, pool) its `capacity.Pool`, made when first read: a fleet-wide deployment
    on 80,000 pools only ever reads the pools of the classes its engines fit."""

    def __init__(
        self,
        clusters: Mapping[str, Cluster],
        matcher: Matcher,
        used: Mapping[tuple[str, str], Sequence[capacity.NodeUse]],
    ) -> None:
        self._clusters = clusters
        self._matcher = matcher
        self._used = used
        self._made: dict[tuple[str, str], capacity.Pool] = {}

    def get(self, key: tuple[str, str]) -> capacity.Pool | None:
        account = self._made.get(key)
        if account is not None:
            return account
        cluster = self._clusters.get(key[0])
        pool = next((p for p in cluster.pools if p.name == key[1]), None) if cluster else None
        if pool is None:
            return None
        account = capacity.Pool(pool.capacity, self._matcher.shape(pool.class_name))
        uses = self._used.get(key)
        if uses:
            account.load(uses)
        self._made[key] = account
        return account

    def __getitem__(self, key: tuple[str, str]) -> capacity.Pool:
        account = self.get(key)
        if account is None:
            raise KeyError(key)
        return account


class Scheduler:
    """One scheduling decision over one fleet snapshot: per (cluster, pool) the nodes and what
    is taken on each (`plnt.capacity.Pool`)."""

    def __init__(
        self,
        engines: Sequence[Engine],
        clusters: Iterable[Cluster],
        classes: Mapping[str, Mapping[str, Any]],
        evaluate: Evaluate,
        used: Mapping[tuple[str, str], Sequence[capacity.NodeUse]] | None = None,
    ):
        self.engines = tuple(engines)
        self.clusters = {c.name: c for c in clusters}
        self.matcher = Matcher(classes, evaluate)
        self.pools = _Accounts(self.clusters, self.matcher, used or {})

    def charge_bound(self, replica: PlacedReplica) -> None:
        """A replica the binder committed: exactly its slots (what no longer fits is the
        binder's to report)."""
        for pool, slots in (replica.slots or {}).items():
            account = self.pools.get((replica.cluster, pool))
            if account is not None:
                account.take(slots)

    def charge_proposed(self, replica: PlacedReplica) -> None:
        """A replica not committed yet (or placed before the binder): packed by its demand, each
        pod where it still fits, so a pool it over-fills reads as full."""
        for pool, pods in replica.needs.items():
            account = self.pools.get((replica.cluster, pool))
            if account is not None:
                account.pack_what_fits(pods)

    def release_bound(self, replica: PlacedReplica) -> None:
        """Gives back a committed replica's slots (one the fleet view counts that is let go)."""
        for pool, slots in (replica.slots or {}).items():
            account = self.pools.get((replica.cluster, pool))
            if account is not None:
                account.release(slots)

    def charge(self, replica: PlacedReplica) -> None:
        if replica.state == binding.REFUSED_STATE:
            return
        if replica.slots is not None:
            self.charge_bound(replica)
        else:
            self.charge_proposed(replica)

    def choose(self, cluster: Cluster) -> _Choice | None:
        """The pools this replica would take on `cluster`, or None if it does not fit.

        Depth-first over engines in spec order, each trying its candidate pools by (devices
        wasted, name): the first complete assignment wins, so the common case is the greedy
        one, and engines that only fit by sharing pools differently are still found. The
        search visits at most SEARCH_BUDGET pools per call.
        """
        options: list[list[tuple[int, Pool, EngineFit]] | None] = []
        for i, engine in enumerate(self.engines):
            if not engine.selective:
                options.append(None)
                continue
            fits = []
            for pool in cluster.pools:
                fit = self.matcher.fit(i, engine, pool.class_name)
                if isinstance(fit, str):
                    continue
                account = self.pools[(cluster.name, pool.name)]
                slots = account.pack(fit.pods)
                if slots is None:
                    continue
                waste = account.waste(slots)
                account.release(slots)
                fits.append((waste, pool, fit))
            if not fits:
                return None
            fits.sort(key=lambda wpf: (wpf[0], wpf[2].waste, wpf[1].name))
            options.append(fits)
        selective = [o for o in options if o is not None]
        found: tuple[int, list[tuple[Pool, EngineFit] | None]] | None
        if len(selective) == 1:  # one engine to place: its best pool is the answer
            waste, pool, fit = selective[0][0]
            found = (waste, [(pool, fit) if o is not None else None for o in options])
        else:
            found = self._search(cluster.name, options, [], [SEARCH_BUDGET])
        if found is None:
            return None
        waste, chosen = found
        static = sum(c[1].waste for c in chosen if c is not None)
        default = next((c[0] for c in chosen if c is not None), None)
        if default is None:
            pools = sorted(cluster.pools, key=lambda p: p.name)
            if not pools:
                return None
            default = pools[0]
        return _Choice(waste, static, [c if c is not None else (default, None) for c in chosen])

    def _search(
        self,
        cluster: str,
        options: list[list[tuple[int, Pool, EngineFit]] | None],
        chosen: list[tuple[Pool, EngineFit] | None],
        budget: list[int],
    ) -> tuple[int, list[tuple[Pool, EngineFit] | None]] | None:
        """Packs engine len(chosen) onto its next candidate pool, recursing; every pack is
        released again before returning (the pools are left as found)."""
        index = len(chosen)
        if index == len(options):
            return 0, list(chosen)
        fits = options[index]
        if fits is None:
            return self._search(cluster, options, [*chosen, None], budget)
        for _, pool, fit in fits:
            if budget[0] <= 0:
                return None
            budget[0] -= 1
            account = self.pools[(cluster, pool.name)]
            slots = account.pack(fit.pods)
            if slots is None:
                continue
            waste = account.waste(slots)
            found = self._search(cluster, options, [*chosen, (pool, fit)], budget)
            account.release(slots)
            if found is not None:
                return found[0] + waste, found[1]
        return None

    def take(self, cluster: str, choice: _Choice) -> None:
        """Charges a chosen placement (the same packs `choose` found, in the same order)."""
        for engine, (pool, fit) in zip(self.engines, choice.pools, strict=True):
            if fit is not None and engine.selective:
                slots = self.pools[(cluster, pool.name)].pack(fit.pods)
                assert slots is not None, "a chosen placement packs again"

    def place(
        self, count: int, candidates: Sequence[Cluster], pinned: Sequence[PlacedReplica]
    ) -> list[Placement]:
        """Up to `count` new replicas, one at a time, each on the best candidate cluster.

        A heap keyed by (replicas of this revision on the cluster, waste, name) holds every
        cluster that fits one more; placing a replica changes only that cluster's pools, so
        only its entry is recomputed.
        """
        on_cluster: dict[str, int] = {}
        for r in pinned:
            on_cluster[r.cluster] = on_cluster.get(r.cluster, 0) + 1
        heap = []
        for c in candidates:
            choice = self.choose(c)
            if choice is not None:
                heap.append(
                    (on_cluster.get(c.name, 0), choice.waste, choice.static, c.name, choice)
                )
        heapq.heapify(heap)
        placed: list[Placement] = []
        while heap and len(placed) < count:
            replicas_there, _, _, name, choice = heapq.heappop(heap)
            cluster = self.clusters[name]
            placed.append(self.placement(cluster, choice))
            self.take(name, choice)
            following = self.choose(cluster)
            if following is not None:
                key = (replicas_there + 1, following.waste, following.static, name)
                heapq.heappush(heap, (*key, following))
        return placed

    def why_not(self, cluster: Cluster) -> str:
        """Why one more replica does not fit on `cluster`, per engine and pool, in the unit
        that ran out (devices, CPU, memory, or whole nodes for gangs)."""
        if not cluster.ready:
            return "not Ready"
        if cluster.closed:
            return cluster.closed
        if not cluster.pools:
            return "no node pools"
        parts = []
        for i, engine in enumerate(self.engines):
            if not engine.selective:
                continue
            per_pool = []
            for pool in sorted(cluster.pools, key=lambda p: p.name):
                fit = self.matcher.fit(i, engine, pool.class_name)
                if isinstance(fit, str):
                    per_pool.append(f"pool {pool.name}: {fit}")
                    continue
                account = self.pools[(cluster.name, pool.name)]
                slots = account.pack(fit.pods)
                if slots is None:
                    # a pool offering fewer nodes than its spec says why (plnt.pool_nodes)
                    fewer = cluster.reduced.get(pool.name)
                    fewer = f", {fewer}" if fewer else ""
                    per_pool.append(f"pool {pool.name}: {account.shortfall(fit.pods)}{fewer}")
                else:
                    account.release(slots)
            if len(per_pool) == len(cluster.pools):
                parts.append(f"engine {engine.name}: " + "; ".join(per_pool))
        return "; ".join(parts) or "engines do not fit together on its pools"

    def placement(self, cluster: Cluster, choice: _Choice) -> Placement:
        engines = []
        nodes: dict[str, int] = {}
        demand: dict[str, tuple[capacity.Pods, ...]] = {}
        for engine, (pool, fit) in zip(self.engines, choice.pools, strict=True):
            members = []
            if fit is not None:
                demand[pool.name] = demand.get(pool.name, ()) + fit.pods
            for idx, member in enumerate(engine.members):
                devices = fit.devices[idx] if fit is not None else None
                requests: list[dict[str, Any]] = []
                if member.requests is not None and devices is not None:
                    nodes[pool.name] = nodes.get(pool.name, 0) + member.pods * engine.copies
                    for req, dev in zip(member.requests, devices, strict=True):
                        if (dev.get("claim") or CLAIM_DRA) != CLAIM_DRA:
                            continue
                        request: dict[str, Any] = {
                            "name": req.name,
                            "count": req.count,
                            "deviceClassName": dev.get("deviceClassName") or dev.get("driver"),
                        }
                        if req.selectors:
                            request["selectors"] = [{"cel": s} for s in req.selectors]
                        requests.append(request)
                members.append(MemberPlacement(pool.name, tuple(requests)))
            engines.append(EnginePlacement(engine.name, pool.name, tuple(members)))
        return Placement(cluster.name, tuple(engines), nodes, demand)


def keep_pins(
    own: Sequence[PlacedReplica],
    clusters: Mapping[str, Cluster],
    replicas: int,
    admitted: Callable[[Cluster], bool] = lambda _: True,
    *,
    serving: frozenset[str] = frozenset(),
    failed: frozenset[str] = frozenset(),
) -> tuple[list[PlacedReplica], list[PlacedReplica], list[PlacedReplica]]:
    """(kept, released, held): pins stay while their cluster exists; of more than `replicas`,
    those on clusters that are not Ready go first, then those not `serving`, then the highest
    index, so the replicas that serve never drop below what they were. A replica the binder
    refused goes, and so does one it has not bound whose cluster no longer `admitted` its
    namespace: it is a proposal the binder will refuse, whatever the view it was placed on
    said. A bound one keeps its pin (tightening a fence evicts nothing).

    `failed` replicas (on a cluster degraded past the failover grace period, failover.py) do
    not count toward `replicas`, so replacements are placed; each is held (kept, in `kept` and
    `held`) while the others that serve are fewer than `replicas`, lowest index first, and
    released once they are not."""

    def stays(r: PlacedReplica) -> bool:
        cluster = clusters.get(r.cluster)
        if cluster is None or r.state == binding.REFUSED_STATE:
            return False
        return r.state == binding.BOUND or admitted(cluster)

    alive = [r for r in own if stays(r) and r.name not in failed]
    failing = sorted(
        (r for r in own if stays(r) and r.name in failed),
        key=lambda r: (replica_index(r.name), r.name),
    )
    gone = [r for r in own if not stays(r)]
    alive.sort(
        key=lambda r: (
            not clusters[r.cluster].ready,
            r.name not in serving,
            replica_index(r.name),
            r.name,
        )
    )
    kept = alive[:replicas]
    serve = sum(1 for r in kept if r.name in serving)
    held = failing[: max(0, min(len(failing), replicas - serve))]
    return kept + held, gone + alive[replicas:] + failing[len(held) :], held


def replica_index(name: str) -> int:
    found = _INDEX.search(name)
    return int(found.group(1)) if found else 1 << 30


def schedule(
    engines: Sequence[Engine],
    *,
    replicas: int,
    cluster_selector: Callable[[Mapping[str, str]], bool],
    clusters: Sequence[Cluster],
    classes: Sequence[Mapping[str, Any]],
    fleet: Sequence[PlacedReplica],
    own: Sequence[PlacedReplica],
    evaluate: Evaluate | None = None,
    compile_check: Compile | None = None,
    place_new: bool = True,
    siblings: Sequence[PlacedReplica] = (),
    used: Mapping[tuple[str, str], Sequence[capacity.NodeUse]] | None = None,
    counted: frozenset[tuple[str, str]] = frozenset(),
    fleet_size: int | None = None,
    namespace: str = "",
    namespace_labels: Mapping[str, str] | None = None,
    serving: frozenset[str] = frozenset(),
    failed: frozenset[str] = frozenset(),
) -> Schedule:
    """Keeps `own` pins that still have a cluster and places new replicas up to `replicas`.

    `fleet` is every replica on the fleet (any deployment, any namespace); `own` are this
    deployment's replicas of the revision being scheduled (a subset of `fleet` or not).
    `place_new=False` only keeps pins (a revision whose engines are no longer in the spec).
    `siblings` are the deployment's replicas of other revisions that stay (the stable ones
    beside a canary): they count for spreading; their capacity is already in `fleet`.
    `used` is what the fleet view says is committed per (cluster, pool); `counted` the
    (namespace, name) of `own` replicas it already counts: those kept are not charged again, those
    let go are given back, so the snapshot is the one `fleet` alone would give. `fleet_size`: the
    clusters on the whole fleet when `clusters` is narrowed to those the selector can match.
    `namespace_labels`: the labels of the deployment's `namespace`; a cluster whose fence
    (spec.namespaceSelector) does not admit them takes nothing new and is named in the shortfall,
    and loses the `own` replicas the binder has not bound (None: no fence is checked).
    `serving`: the names of `own` replicas that serve (Ready and routed); `failed`: those past
    their failover grace period, replaced and held until the replacements serve (`keep_pins`).
    `evaluate`/`compile_check` default to `plnt.cel.evaluate`/`plnt.cel.compile`.
    """
    if evaluate is None or compile_check is None:
        from plnt import cel

        evaluate = evaluate or cel.evaluate
        compile_check = compile_check or cel.compile
    fleet_clusters = list(clusters)
    size = len(fleet_clusters) if fleet_size is None else max(fleet_size, len(fleet_clusters))
    by_name = {c.name: c for c in fleet_clusters}
    sched = Scheduler(
        engines, fleet_clusters, {c["metadata"]["name"]: c for c in classes}, evaluate, used
    )

    def admitted(c: Cluster) -> bool:
        return namespace_labels is None or tenancy.admits(c.fence, namespace_labels)

    own_keys = {(r.namespace, r.name) for r in own}
    kept, released, held = keep_pins(
        own, by_name, replicas, admitted, serving=serving, failed=failed
    )
    gone = "".join(
        f"; {r.name} released ({why})"
        for r in released
        if (why := _let_go(r, by_name, admitted, failed))
    )
    # Committed replicas first (their slots are exact), then proposals in a fixed order.
    holding = [r for r in fleet if (r.namespace, r.name) not in own_keys]
    holding += [r for r in kept if (r.namespace, r.name) not in counted]
    for r in released:
        if (r.namespace, r.name) in counted:
            sched.release_bound(r)
    for r in sorted(holding, key=lambda r: (r.slots is None, r.namespace, r.name)):
        sched.charge(r)
    # A refusal means the binder's ledger is fuller than this snapshot: for this decision the
    # refused replica's demand is counted where it was, so its replacement looks elsewhere.
    for r in released:
        if r.state == binding.REFUSED_STATE:
            sched.charge_proposed(r)
    counting = len(kept) - len(held)
    needed = replicas - counting if place_new else 0

    invalid = _invalid_selectors(engines, compile_check) if place_new else ""
    if invalid:
        msg = f"{summary(counting, replicas)}{gone}; {invalid}"
        return Schedule(kept, released, [], replicas, INVALID_NODE_SELECTOR, msg, held)

    matching = sorted(
        (c for c in fleet_clusters if cluster_selector(c.labels)), key=lambda c: c.name
    )

    ready = [c for c in matching if c.ready and not c.closed and admitted(c)]
    placed = sched.place(needed, ready, [*kept, *siblings]) if needed > 0 else []

    total = counting + len(placed)
    head = summary(total, replicas) + gone
    if held:
        head += "; held until replacements serve: " + ", ".join(
            f"{r.name} on {r.cluster}" for r in held
        )
    if total >= replicas or not place_new:
        return Schedule(kept, released, placed, replicas, SCHEDULED, head, held)
    if not matching:
        msg = f"{head}; no InferenceCluster matches clusterSelector"
        msg += f" ({size} on the fleet)"
        return Schedule(kept, released, placed, replicas, NO_MATCHING_CLUSTERS, msg, held)
    rejected = [
        f"cluster {c.name}: {sched.why_not(c)}"
        if admitted(c)
        else tenancy.fence_message(c.name, namespace)
        for c in matching
    ]
    erring = _erring_selectors(engines, sched.matcher)
    if erring:
        msg = f"{head}; {erring}"
        return Schedule(kept, released, placed, replicas, INVALID_NODE_SELECTOR, msg, held)
    unmatched = size - len(matching)
    listed = rejected[:MAX_LISTED_CLUSTERS]
    if len(rejected) > len(listed):
        listed.append(f"and {len(rejected) - len(listed)} more clusters")
    if unmatched:
        listed.append(f"{unmatched} clusters do not match clusterSelector")
    msg = f"{head}; " + "; ".join(listed)
    return Schedule(kept, released, placed, replicas, INSUFFICIENT_CAPACITY, msg, held)


def _let_go(
    r: PlacedReplica,
    clusters: Mapping[str, Cluster],
    admitted: Callable[[Cluster], bool],
    failed: frozenset[str] = frozenset(),
) -> str:
    """Why `keep_pins` let a replica go, or '' when it was only one more than wanted."""
    cluster = clusters.get(r.cluster)
    if cluster is None:
        return f"cluster {r.cluster} is gone"
    if r.name in failed:
        return f"failed over from cluster {r.cluster}: its replacement serves"
    if r.state == binding.REFUSED_STATE:
        return f"the binder refused it: {r.message}"
    if r.state != binding.BOUND and not admitted(cluster):
        return tenancy.fence_message(r.cluster, r.namespace)
    return ""


def summary(placed: int, wanted: int) -> str:
    return f"placed {placed} of {wanted} replicas"


def _selector_paths(engines: Sequence[Engine]) -> Iterator[tuple[str, str]]:
    """(field path, expression) of every CEL selector of the deployment's engines: the view
    keeps the spec's order of engines, members, devices and selectors."""
    for e, engine in enumerate(engines):
        for m, member in enumerate(engine.members):
            for d, request in enumerate(member.requests or ()):
                for s, expr in enumerate(request.selectors):
                    path = f"spec.engines[{e}].members[{m}].nodeSelector.devices[{d}]"
                    yield f"{path}.selectors[{s}].cel", expr


def _erring_selectors(engines: Sequence[Engine], matcher: Matcher) -> str:
    """Selectors that raised an error on every device they were evaluated on, by field path."""
    errors = []
    for path, expr in _selector_paths(engines):
        error = matcher.always_errs(expr)
        if error is not None:
            errors.append(f"{path}: fails on every device it was tried on ({error})")
    return "; ".join(errors)


def _invalid_selectors(engines: Sequence[Engine], compile_check: Compile) -> str:
    """Selectors that do not compile, by field path (each distinct expression checked once)."""
    seen: dict[str, str] = {}
    errors = []
    for path, expr in _selector_paths(engines):
        if expr not in seen:
            try:
                compile_check(expr)
                seen[expr] = ""
            except Exception as err:
                seen[expr] = str(err)
        if seen[expr]:
            errors.append(f"{path}: {seen[expr]}")
    return "; ".join(errors)
