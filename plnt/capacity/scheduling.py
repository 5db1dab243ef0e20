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
it will report; fewer while fewer are Ready, `plnt.capacity.pool_nodes`), less what every placed
replica takes on them: the slots the binder committed for a bound one, its demand packed where
it fits for one not bound yet. A replica is placed only where every engine's pods pack in full:
never overcommitted.

Pins. A replica already placed stays on its cluster and pools while the cluster exists, Ready
or not (the function drops only its endpoint); a replica whose cluster is gone is released and
a new one placed in its stead, and so is one the binder refused, or has not bound yet while its
cluster's fence no longer admits the namespace. When there are more pins than wanted, replicas
on clusters that are not Ready are released first, then the highest-numbered.

Order (deterministic for the same inputs):
1. Candidate clusters match ``clusterSelector``, are Ready and open (a ledger that does not read
   closes its cluster), and their fence admits the namespace.
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

from plnt import capacity, conditions, labels
from plnt.capacity import admission, binding
from plnt.capacity import demand as demand_
from plnt.capacity.offer import Cluster, Pool, class_shape
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
    demand: Mapping[str, tuple[capacity.Pods, ...]]  # per pool (plnt.capacity.binding.demand_of)
    engine_pools: tuple[tuple[str, str], ...]  # (engine, pool)
    slots: Mapping[str, tuple[capacity.Slot, ...]] | None = None  # committed by the binder
    state: str = binding.PENDING
    message: str = ""  # the binder's refusal
    over_committed: str = ""
    ledger: int = 0  # bound: the ledger sequence of the commit


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
    """CPU (millicores) and memory (bytes) one pod of the member asks for (plnt.capacity.demand)."""
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
    """A ModelReplica as placed: its demand (plnt.capacity.binding.demand_of) and the binder's
    answer (`whole_spec` False: read without its pod templates, plnt.capacity.binding.state_of)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    obj_labels = meta.get("labels") or {}
    engine_pools = []
    for engine in spec.get("engines") or []:
        pool = next((m.get("nodePoolName", "") for m in engine.get("members") or []), "")
        engine_pools.append((engine.get("name", ""), pool))
    state = binding.state_of(obj, whole_spec=whole_spec)
    return PlacedReplica(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        deployment=obj_labels.get(labels.DEPLOYMENT, ""),
        revision=obj_labels.get(labels.REVISION, ""),
        cluster=spec.get("clusterName", ""),
        demand=state.demand,
        engine_pools=tuple(engine_pools),
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


def _choice(
    cluster: Cluster, waste: int, chosen: list[tuple[Pool, EngineFit] | None]
) -> _Choice | None:
    """The choice of a complete assignment: an engine with no nodeSelector goes to the pool of
    the first engine that has one, else to the cluster's first pool by name (None: it has no
    pools)."""
    static = sum(c[1].waste for c in chosen if c is not None)
    default = next((c[0] for c in chosen if c is not None), None)
    if default is None:
        pools = sorted(cluster.pools, key=lambda p: p.name)
        if not pools:
            return None
        default = pools[0]
    return _Choice(waste, static, [c if c is not None else (default, None) for c in chosen])


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
        for pool, pods in replica.demand.items():
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
            fits = self.pools_that_fit(cluster, i, engine)
            if not fits:
                return None
            options.append(fits)
        selective = [o for o in options if o is not None]
        found: tuple[int, list[tuple[Pool, EngineFit] | None]] | None
        if len(selective) == 1:  # one engine to place: its best pool is the answer
            waste, pool, fit = selective[0][0]
            found = (waste, [(pool, fit) if o is not None else None for o in options])
        else:
            found = self._search(cluster.name, options, [], [SEARCH_BUDGET])
        return None if found is None else _choice(cluster, *found)

    def pools_that_fit(
        self, cluster: Cluster, index: int, engine: Engine
    ) -> list[tuple[int, Pool, EngineFit]]:
        """The pools of `cluster` whose class fits engine `index` and that hold its pods now,
        each with the devices the engine would waste there, best first: (waste, the class's
        whole-node waste, name)."""
        fits = []
        for pool in cluster.pools:
            fit = self.matcher.fit(index, engine, pool.class_name)
            if isinstance(fit, str):
                continue
            account = self.pools[(cluster.name, pool.name)]
            slots = account.pack(fit.pods)
            if slots is None:
                continue
            waste = account.waste(slots)
            account.release(slots)
            fits.append((waste, pool, fit))
        fits.sort(key=lambda wpf: (wpf[0], wpf[2].waste, wpf[1].name))
        return fits

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
                    # a pool offering fewer nodes than its spec says why (plnt.capacity.pool_nodes)
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
        demand: dict[str, tuple[capacity.Pods, ...]] = {}
        for engine, (pool, fit) in zip(self.engines, choice.pools, strict=True):
            members = []
            if fit is not None:
                demand[pool.name] = demand.get(pool.name, ()) + fit.pods
            for idx, member in enumerate(engine.members):
                devices = fit.devices[idx] if fit is not None else None
                requests: list[dict[str, Any]] = []
                if member.requests is not None and devices is not None:
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
        return Placement(cluster.name, tuple(engines), demand)


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


@dataclasses.dataclass(frozen=True)
class Ask:
    """What one revision of a deployment asks of the fleet: `replicas` copies of `engines` on
    clusters whose labels `cluster_selector` accepts. `place_new` False only keeps pins (a
    revision whose engines are no longer in the spec, or whose templates are refused)."""

    engines: Sequence[Engine]
    replicas: int
    cluster_selector: Callable[[Mapping[str, str]], bool]
    place_new: bool = True


@dataclasses.dataclass(frozen=True)
class FleetState:
    """The fleet one decision sees. `replicas` is every replica on it (any deployment, any
    namespace); `used` what the fleet view says is committed per (cluster, pool), and `counted`
    the (namespace, name) of the deployment's own replicas the view already counts (those kept
    are not charged again, those let go are given back, so the snapshot is the one `replicas`
    alone would give). `size`: the clusters on the whole fleet when `clusters` is narrowed to
    those the selector can match."""

    clusters: Sequence[Cluster]
    classes: Sequence[Mapping[str, Any]]
    replicas: Sequence[PlacedReplica] = ()
    used: Mapping[tuple[str, str], Sequence[capacity.NodeUse]] | None = None
    counted: frozenset[tuple[str, str]] = frozenset()
    size: int | None = None


@dataclasses.dataclass(frozen=True)
class Owner:
    """The deployment's side of a decision. `own`: its replicas of the revision scheduled (a
    subset of the fleet's or not); `siblings`: its replicas of other revisions that stay (the
    stable ones beside a canary), which count for spreading, their capacity already in the
    fleet's. `labels`: those of its `namespace`; a cluster whose fence (spec.namespaceSelector)
    does not admit them takes nothing new and is named in the shortfall, and loses the `own`
    replicas the binder has not bound (None: no fence is checked). `serving`: the names of
    `own` replicas that serve (Ready and routed); `failed`: those past their failover grace
    period, replaced and held until the replacements serve (`keep_pins`)."""

    own: Sequence[PlacedReplica] = ()
    siblings: Sequence[PlacedReplica] = ()
    namespace: str = ""
    labels: Mapping[str, str] | None = None
    serving: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()

    def admits(self, cluster: Cluster) -> bool:
        return self.labels is None or admission.admits(cluster.fence, self.labels)


@dataclasses.dataclass(frozen=True)
class Cel:
    """How selectors are evaluated and compiled (`plnt.cel` unless a test stubs it)."""

    evaluate: Evaluate
    compile: Compile

    @staticmethod
    def default() -> Cel:
        from plnt import cel

        return Cel(cel.evaluate, cel.compile)


@dataclasses.dataclass(frozen=True)
class Pins:
    """Phase 1's answer: the `own` replicas that stay, those let go and those held (kept until
    their replacements serve), and what the message says of those let go."""

    kept: list[PlacedReplica]
    released: list[PlacedReplica]
    held: list[PlacedReplica]
    said: str

    @property
    def counting(self) -> int:
        """The kept replicas that count toward the wanted number (not the held ones)."""
        return len(self.kept) - len(self.held)


def schedule(ask: Ask, fleet: FleetState, owner: Owner, cel: Cel | None = None) -> Schedule:
    """Keeps `owner.own` pins that still have a cluster and places new replicas up to
    `ask.replicas`, in phases, each a function below:

    1. pins (`pins`): which own replicas stay, which go, which are held;
    2. account (`account`): charge what the fleet already holds, committed replicas first;
       then a selector that does not compile stops here (InvalidNodeSelector);
    3. admit (`admitted`): the clusters that match the selector, are Ready and open, and whose
       fence admits the namespace;
    4. fit and score (`Scheduler.choose`): per admitted cluster, the pools each engine fits and
       the devices one more replica would waste there;
    5. assign (`Scheduler.place`): each new replica to the best-scored cluster, charging it
       there before the next;
    6. verdict: Scheduled, or why fewer than wanted are kept and placed (`shortfall`).
    """
    cel = cel or Cel.default()
    by_name = {c.name: c for c in fleet.clusters}
    classes = {c["metadata"]["name"]: c for c in fleet.classes}
    sched = Scheduler(ask.engines, fleet.clusters, classes, cel.evaluate, fleet.used)
    kept = pins(ask, by_name, owner)
    account(sched, fleet, owner, kept)
    if ask.place_new and (invalid := _invalid_selectors(ask.engines, cel.compile)):
        msg = f"{summary(kept.counting, ask.replicas)}{kept.said}; {invalid}"
        return _schedule(ask, kept, [], INVALID_NODE_SELECTOR, msg)
    matching = sorted(
        (c for c in fleet.clusters if ask.cluster_selector(c.labels)), key=lambda c: c.name
    )
    needed = ask.replicas - kept.counting if ask.place_new else 0
    placed: list[Placement] = []
    if needed > 0:
        placed = sched.place(needed, admitted(matching, owner), [*kept.kept, *owner.siblings])
    total = kept.counting + len(placed)
    head = summary(total, ask.replicas) + kept.said + _holding(kept)
    if total >= ask.replicas or not ask.place_new:
        return _schedule(ask, kept, placed, SCHEDULED, head)
    reason, why = shortfall(ask, fleet, owner, sched, matching)
    return _schedule(ask, kept, placed, reason, f"{head}; {why}")


def pins(ask: Ask, clusters: Mapping[str, Cluster], owner: Owner) -> Pins:
    """Phase 1: `keep_pins` over the own replicas, and why each one let go went."""
    kept, released, held = keep_pins(
        owner.own,
        clusters,
        ask.replicas,
        owner.admits,
        serving=owner.serving,
        failed=owner.failed,
    )
    said = "".join(
        f"; {r.name} released ({why})" for r in released if (why := _let_go(r, clusters, owner))
    )
    return Pins(kept, released, held, said)


def account(sched: Scheduler, fleet: FleetState, owner: Owner, kept: Pins) -> None:
    """Phase 2: charges what the fleet holds. The view's own replicas that are let go are given
    back; then committed replicas (their slots are exact), then proposals in a fixed order. A
    refusal means the binder's ledger is fuller than this snapshot: for this decision the
    refused replica's demand is counted where it was, so its replacement looks elsewhere."""
    own_keys = {(r.namespace, r.name) for r in owner.own}
    holding = [r for r in fleet.replicas if (r.namespace, r.name) not in own_keys]
    holding += [r for r in kept.kept if (r.namespace, r.name) not in fleet.counted]
    for r in kept.released:
        if (r.namespace, r.name) in fleet.counted:
            sched.release_bound(r)
    for r in sorted(holding, key=lambda r: (r.slots is None, r.namespace, r.name)):
        sched.charge(r)
    for r in kept.released:
        if r.state == binding.REFUSED_STATE:
            sched.charge_proposed(r)


def admitted(matching: Sequence[Cluster], owner: Owner) -> list[Cluster]:
    """Phase 3: the matching clusters a new replica may go to."""
    return [c for c in matching if c.ready and not c.closed and owner.admits(c)]


def shortfall(
    ask: Ask, fleet: FleetState, owner: Owner, sched: Scheduler, matching: Sequence[Cluster]
) -> tuple[str, str]:
    """Phase 6, when fewer replicas than wanted are kept or placed: the reason and why, most
    specific first: no cluster matches, a selector errs on every device, or per matching
    cluster what does not fit there."""
    size = len(fleet.clusters) if fleet.size is None else max(fleet.size, len(fleet.clusters))
    if not matching:
        return (
            NO_MATCHING_CLUSTERS,
            f"no InferenceCluster matches clusterSelector ({size} on the fleet)",
        )
    # Every cluster's shortfall first: it tries each selector on every pool, which is what
    # tells a selector that errs everywhere from one that only matches nothing here.
    rejected = [
        f"cluster {c.name}: {sched.why_not(c)}"
        if owner.admits(c)
        else admission.fence_message(c.name, owner.namespace)
        for c in matching
    ]
    erring = _erring_selectors(ask.engines, sched.matcher)
    if erring:
        return INVALID_NODE_SELECTOR, erring
    listed = rejected[:MAX_LISTED_CLUSTERS]
    if len(rejected) > len(listed):
        listed.append(f"and {len(rejected) - len(listed)} more clusters")
    if unmatched := size - len(matching):
        listed.append(f"{unmatched} clusters do not match clusterSelector")
    return INSUFFICIENT_CAPACITY, "; ".join(listed)


def _holding(kept: Pins) -> str:
    if not kept.held:
        return ""
    return "; held until replacements serve: " + ", ".join(
        f"{r.name} on {r.cluster}" for r in kept.held
    )


def _schedule(ask: Ask, kept: Pins, placed: list[Placement], reason: str, msg: str) -> Schedule:
    return Schedule(kept.kept, kept.released, placed, ask.replicas, reason, msg, kept.held)


def _let_go(r: PlacedReplica, clusters: Mapping[str, Cluster], owner: Owner) -> str:
    """Why `keep_pins` let a replica go, or '' when it was only one more than wanted."""
    cluster = clusters.get(r.cluster)
    if cluster is None:
        return f"cluster {r.cluster} is gone"
    if r.name in owner.failed:
        return f"failed over from cluster {r.cluster}: its replacement serves"
    if r.state == binding.REFUSED_STATE:
        return f"the binder refused it: {r.message}"
    if r.state != binding.BOUND and not owner.admits(cluster):
        return admission.fence_message(r.cluster, r.namespace)
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
