"""Node-pool capacity in devices: what the scheduler proposes with and the binder commits with.

A pool is `nodes` identical nodes; one node offers its InferenceClass's devices (`count` of each
device kind, by device name) and, when the class declares `nodeResources`, CPU (millicores)
and memory (bytes). A pod asks for some of one node: DRA allocates per device, so several
pods share a node up to its devices. A pod of a gang (Leader/Worker) takes a whole node (LWS
places one pod per node and the gang's fabric wants the node to itself), and so does a pod whose
demand is unknown (a ModelReplica made by hand, or one with no `plnt.work/pool-demand`).

Nodes are virtual: a slot says "node 3 of the pool", not which Kubernetes node. That is enough to
prove that a packing exists with no node over its devices; kube-scheduler and the DRA allocator
choose the real nodes. Packing is best fit (the fullest node the pod fits on, then the lowest
index) so small pods fill partly used nodes before opening empty ones.

Everything here is pure and deterministic: the ModelDeployment function, the binder and the
protocol model all use it, so they count the same way.

This package is where capacity lives, a module per concern, each pure and shared by the
scheduler and the binder so both answer from the same code:

- here: the node-pool model (pods, slots, packing);
- `offer`: what an InferenceCluster's pools offer, read one way for every reader;
- `pool_nodes`: the pools' Ready nodes, which cap what a pool offers;
- `demand`: what a replica asks of each pool, from its spec;
- `admission`: which namespaces a cluster's fence admits;
- `quotas`: what the namespaces an InferenceQuota covers may hold together, and its ledger;
- `tenant`: one namespace as admission and quotas read it (the scheduler's and binder's check);
- `ledger`: what the binder has committed on a cluster, and where it keeps it;
- `ledger_parse`: reading a cluster's or a quota's ledger, and what is wrong with one that does
  not read;
- `commit`: the binder's decision (what to commit, refuse or report over-committed);
- `binding`: what a replica asks and whether a ledger commits it (what renders it);
- `fleet_view`: the committed fleet as the binder publishes it and the scheduler reads it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

CPU = "cpu"  # millicores
MEMORY = "memory"  # bytes
DEVICE_PREFIX = "device:"  # device kinds by name, e.g. device:gpu

Vector = tuple[tuple[str, int], ...]  # sorted (resource, amount), amounts > 0


def device_key(name: str) -> str:
    return DEVICE_PREFIX + name


def vector(amounts: Mapping[str, int]) -> Vector:
    return tuple(sorted((k, int(v)) for k, v in amounts.items() if int(v) > 0))


def describe(key: str) -> str:
    return key[len(DEVICE_PREFIX) :] if key.startswith(DEVICE_PREFIX) else key


@dataclasses.dataclass(frozen=True)
class Pods:
    """`count` identical pods, each asking `demand` of one node, or a whole node."""

    count: int
    demand: Vector
    whole: bool = False

    def to_json(self) -> list[Any]:
        return [self.count, dict(self.demand), self.whole]

    @staticmethod
    def from_json(raw: Any) -> Pods:
        count, demand, whole = raw
        if not isinstance(demand, dict) or not isinstance(whole, bool):
            raise ValueError(f"bad pods entry {raw!r}")
        return Pods(int(count), vector({str(k): int(v) for k, v in demand.items()}), whole)


Demand = Mapping[str, tuple[Pods, ...]]  # per pool


@dataclasses.dataclass(frozen=True)
class Slot:
    """One pod on one (virtual) node of a pool."""

    node: int
    demand: Vector
    whole: bool = False

    def to_json(self) -> list[Any]:
        return [self.node, dict(self.demand), self.whole]

    @staticmethod
    def from_json(raw: Any) -> Slot:
        node, demand, whole = raw
        if not isinstance(demand, dict) or not isinstance(whole, bool):
            raise ValueError(f"bad slot {raw!r}")
        return Slot(int(node), vector({str(k): int(v) for k, v in demand.items()}), whole)


Slots = Mapping[str, tuple[Slot, ...]]  # per pool


@dataclasses.dataclass(frozen=True)
class NodeUse:
    """What is taken on one used (virtual) node of a pool: its pods, whether a gang pod holds it
    whole, and the amounts taken. The fleet view carries a pool as its used nodes only."""

    node: int
    pods: int
    whole: bool
    used: Vector

    def to_json(self) -> list[Any]:
        return [self.node, self.pods, int(self.whole), dict(self.used)]

    @staticmethod
    def from_json(raw: Any) -> NodeUse:
        node, pods, whole, used = raw
        if not isinstance(used, dict):
            raise ValueError(f"bad node entry {raw!r}")
        return NodeUse(
            int(node), int(pods), bool(whole), vector({str(k): int(v) for k, v in used.items()})
        )


def demand_json(demand: Demand) -> str:
    return json.dumps(
        {pool: [p.to_json() for p in pods] for pool, pods in sorted(demand.items())},
        sort_keys=True,
        separators=(",", ":"),
    )


def demand_from_json(text: str) -> dict[str, tuple[Pods, ...]]:
    raw = json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError("demand is not an object")
    return {str(pool): tuple(Pods.from_json(p) for p in pods) for pool, pods in raw.items()}


def slots_json(slots: Slots) -> dict[str, list[list[Any]]]:
    return {pool: [s.to_json() for s in ss] for pool, ss in sorted(slots.items())}


def slots_from_json(raw: Any) -> dict[str, tuple[Slot, ...]]:
    if not isinstance(raw, dict):
        raise ValueError("slots are not an object")
    return {str(pool): tuple(Slot.from_json(s) for s in ss) for pool, ss in raw.items()}


def whole_nodes(pool_nodes: Mapping[str, int]) -> dict[str, tuple[Pods, ...]]:
    """The demand of a replica known only by its nodes per pool: one whole node each."""
    return {pool: (Pods(int(n), (), True),) for pool, n in pool_nodes.items() if int(n) > 0}


def merge(a: Demand, b: Demand) -> dict[str, tuple[Pods, ...]]:
    out = {k: tuple(v) for k, v in a.items()}
    for pool, pods in b.items():
        out[pool] = out.get(pool, ()) + tuple(pods)
    return out


@dataclasses.dataclass(frozen=True)
class Shape:
    """One node of a pool: what it offers, and how its devices are claimed: `dra` holds
    (deviceClassName, device key, count per node) of each DRA device kind, `synthetic` the
    device key of each Synthetic one (nothing allocates those: the pool choice is the claim)."""

    offers: Vector
    dra: tuple[tuple[str, str, int], ...] = ()
    synthetic: tuple[str, ...] = ()

    def amount(self, key: str) -> int:
        for k, v in self.offers:
            if k == key:
                return v
        return 0

    def devices(self) -> int:
        return sum(v for k, v in self.offers if k.startswith(DEVICE_PREFIX))


class Pool:
    """The nodes of one pool and what is taken on each. `take`/`pack` charge it, `release`
    gives back; a slot that no longer fits (the pool shrank, or its class did) is `over`."""

    def __init__(self, nodes: int, shape: Shape):
        self.nodes = max(int(nodes), 0)
        self.shape = shape
        self._offers = dict(shape.offers)
        self._free: list[dict[str, int]] | None = None  # made on first use: most pools of a
        # large fleet are never charged in one RunFunction
        self.pods = [0] * self.nodes  # pods on each node
        self.whole = [False] * self.nodes

    @property
    def free(self) -> list[dict[str, int]]:
        if self._free is None:
            self._free = [dict(self._offers) for _ in range(self.nodes)]
        return self._free

    def copy(self) -> Pool:
        out = Pool.__new__(Pool)
        out.nodes, out.shape, out._offers = self.nodes, self.shape, self._offers
        out._free = None if self._free is None else [dict(f) for f in self._free]
        out.pods, out.whole = list(self.pods), list(self.whole)
        return out

    # --- charging ---------------------------------------------------------------------------

    def fits_on(self, node: int, demand: Vector, whole: bool) -> bool:
        if not 0 <= node < self.nodes or self.whole[node]:
            return False
        if whole:
            return self.pods[node] == 0 and self._within(demand)
        free = self.free[node]
        return all(free.get(k, 0) >= v for k, v in demand)

    def _charge(self, node: int, demand: Vector, whole: bool) -> None:
        self.pods[node] += 1
        if whole:
            self.whole[node] = True
            self.free[node] = dict.fromkeys(self._offers, 0)
        else:
            free = self.free[node]
            for k, v in demand:
                free[k] = free.get(k, 0) - v

    def _uncharge(self, node: int, demand: Vector, whole: bool) -> None:
        self.pods[node] -= 1
        if whole:
            self.whole[node] = False
            self.free[node] = dict(self._offers)
        else:
            free = self.free[node]
            for k, v in demand:
                free[k] = free.get(k, 0) + v

    def take(self, slots: Iterable[Slot]) -> list[Slot]:
        """Charges recorded slots; returns those that do not fit (an over-commit), uncharged."""
        over = []
        for s in slots:
            if self.fits_on(s.node, s.demand, s.whole):
                self._charge(s.node, s.demand, s.whole)
            else:
                over.append(s)
        return over

    def release(self, slots: Iterable[Slot]) -> None:
        for s in slots:
            if 0 <= s.node < self.nodes:
                self._uncharge(s.node, s.demand, s.whole)

    def pack(self, pods: Sequence[Pods]) -> list[Slot] | None:
        """Places every pod (best fit), or none of them and returns None."""
        placed: list[Slot] = []
        for group in pods:
            for _ in range(group.count):
                node = self._best(group.demand, group.whole)
                if node is None:
                    self.release(placed)
                    return None
                self._charge(node, group.demand, group.whole)
                placed.append(Slot(node, group.demand, group.whole))
        return placed

    def pack_what_fits(self, pods: Sequence[Pods]) -> int:
        """Places each pod that still fits; returns how many did not (counting a replica that
        may already over-commit as holding everything it can, never nothing)."""
        missing = 0
        for group in pods:
            for _ in range(group.count):
                node = self._best(group.demand, group.whole)
                if node is None:
                    missing += 1
                else:
                    self._charge(node, group.demand, group.whole)
        return missing

    def _within(self, demand: Vector) -> bool:
        """Whether one whole node offers `demand` at all."""
        return all(self._offers.get(k, 0) >= v for k, v in demand)

    def _best(self, demand: Vector, whole: bool) -> int | None:
        if whole:
            if not self._within(demand):
                return None
            return next((i for i in range(self.nodes) if self.pods[i] == 0), None)
        best, best_left = None, 0
        asked = sum(v for _, v in demand)
        for i in range(self.nodes):
            if self.whole[i]:
                continue
            free = self.free[i]
            for k, v in demand:
                if free.get(k, 0) < v:
                    break
            else:
                left = sum(free.values()) - asked  # fullest first, then the lowest index
                if best is None or left < best_left:
                    best, best_left = i, left
        return best

    def usage(self) -> tuple[NodeUse, ...]:
        """The used nodes, in node order: with `load` on an empty pool of the same nodes and
        shape, exactly this pool again."""
        out = []
        for i in range(self.nodes):
            if not self.pods[i]:
                continue
            free = self.free[i]
            used = {k: v - free.get(k, 0) for k, v in self._offers.items()}
            out.append(NodeUse(i, self.pods[i], self.whole[i], vector(used)))
        return tuple(out)

    def load(self, uses: Iterable[NodeUse]) -> None:
        """Sets nodes to what `usage` recorded (an empty pool in, so nothing is charged twice);
        a node beyond the pool (it shrank since) is the binder's over-commit to report."""
        for use in uses:
            if not 0 <= use.node < self.nodes:
                continue
            self.pods[use.node] = use.pods
            self.whole[use.node] = use.whole
            taken = dict(use.used)
            self.free[use.node] = {k: v - taken.get(k, 0) for k, v in self._offers.items()}

    # --- reading ----------------------------------------------------------------------------

    def free_nodes(self) -> int:
        return sum(1 for p in self.pods if p == 0)

    def free_total(self, key: str) -> int:
        return sum(max(f.get(key, 0), 0) for f in self.free)

    def largest_free(self, key: str) -> int:
        return max((max(f.get(key, 0), 0) for f in self.free), default=0)

    def used_devices(self) -> int:
        return self.nodes * self.shape.devices() - sum(
            max(v, 0) for f in self.free for k, v in f.items() if k.startswith(DEVICE_PREFIX)
        )

    def waste(self, slots: Sequence[Slot]) -> int:
        """Devices left idle on the nodes these slots opened (nodes that held nothing else):
        a 1-GPU pod opening an 8-GPU node wastes 7, one joining a used node wastes nothing."""
        opened: dict[int, dict[str, int]] = {}
        for s in slots:
            if self.pods[s.node] == sum(1 for t in slots if t.node == s.node):
                used = opened.setdefault(s.node, {})
                for k, v in s.demand:
                    used[k] = used.get(k, 0) + v
        asked = {k for s in slots for k, _ in s.demand if k.startswith(DEVICE_PREFIX)}
        return sum(self.shape.amount(k) - used.get(k, 0) for used in opened.values() for k in asked)

    def shortfall(self, pods: Sequence[Pods]) -> str:
        """Why `pods` do not fit, in the unit that ran out: the first of a pod larger than a
        node, too few free nodes for the whole-node pods, no node with room for a pod, too
        little free in the pool; else they only do not pack."""
        for why in (self._too_large, self._too_few_nodes, self._no_node_for, self._too_little):
            said = why(pods)
            if said:
                return said
        return "its pods do not pack onto the free nodes"

    def _too_large(self, pods: Sequence[Pods]) -> str:
        for group in pods:
            for k, v in group.demand:
                per_node = self.shape.amount(k)
                if v > per_node:
                    return f"a pod needs {v} {describe(k)}, a node has {per_node}"
        return ""

    def _too_few_nodes(self, pods: Sequence[Pods]) -> str:
        need_whole = sum(p.count for p in pods if p.whole)
        free = self.free_nodes() if need_whole else 0
        if need_whole and free < need_whole:
            return f"not enough free nodes (need {need_whole}, free {free})"
        return ""

    def _no_node_for(self, pods: Sequence[Pods]) -> str:
        for group in pods:
            if group.whole:
                continue
            for k, v in group.demand:
                if self.largest_free(k) < v:
                    per_node = self.shape.amount(k)
                    return (
                        f"not enough free {describe(k)} (need {v} on one node, "
                        f"{self.free_total(k)} of {self.nodes * per_node} free in the pool)"
                    )
        return ""

    def _too_little(self, pods: Sequence[Pods]) -> str:
        total: dict[str, int] = {}
        for group in pods:
            for k, v in group.demand:
                total[k] = total.get(k, 0) + v * group.count
        for k, v in sorted(total.items()):
            free = self.free_total(k)
            if free < v:
                return f"not enough free {describe(k)} (need {v}, free {free})"
        return ""
