"""How the fleet reads: an InferenceCluster's pools and an InferenceClass's node shape.

The scheduler (functions/model_deployment) and the binder (plnt_reconciler) count capacity from
the same reading, so a replica the scheduler places is one the binder can commit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from plnt import capacity, cluster_health, quantity
from plnt.capacity import pool_nodes


class Pool(NamedTuple):  # a tuple: a 10,000-cluster view makes 80,000 of these per read
    name: str
    class_name: str
    capacity: int


@dataclasses.dataclass(frozen=True)
class Cluster:
    name: str
    labels: Mapping[str, str]
    ready: bool
    pools: tuple[Pool, ...]
    gateway: str = ""  # status.gateway.address as the cluster reports it (checked where used)
    # spec.namespaceSelector: the namespaces it admits (plnt.capacity.admission; None: every one)
    fence: Mapping[str, Any] | None = None
    # Why the binder commits nothing on it (its ledger cannot be read): it offers no capacity.
    closed: str = ""
    # Why and since when it is degraded (its API server does not answer, or it is not Ready)
    degraded: cluster_health.Degraded | None = None
    # Pools offering fewer nodes than their spec says, and why (plnt.capacity.pool_nodes)
    reduced: Mapping[str, str] = dataclasses.field(default_factory=dict)


def amount(raw: Any, *, milli: bool) -> int:
    """A quantity as an integer (millis for CPU), rounded up; 0 if it does not parse (the
    ModelReplica validation reports it)."""
    try:
        value = quantity.parse_quantity(str(raw)).value
    except (quantity.QuantityError, ValueError):
        return 0
    value = value * 1000 if milli else value
    return max(math.ceil(value), 0)


def cluster_of(obj: Mapping[str, Any]) -> Cluster:
    """An InferenceCluster: Ready condition, labels, and node capacity per pool. A cluster whose
    API server the binder found not answering (plnt.cluster_health) is not Ready, whatever its
    condition still says: the condition follows once Crossplane has reconciled it."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    degraded = cluster_health.degradation(obj)
    ready = degraded is None and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    pools, reduced = _pools(obj)
    gateway = status.get("gateway")
    gateway = gateway.get("address") if isinstance(gateway, dict) else None
    return Cluster(
        meta.get("name", ""),
        meta.get("labels") or {},
        ready,
        tuple(pools),
        gateway if isinstance(gateway, str) else "",
        (obj.get("spec") or {}).get("namespaceSelector"),
        degraded=degraded,
        reduced=reduced,
    )


def _pools(obj: Mapping[str, Any]) -> tuple[list[Pool], dict[str, str]]:
    """The cluster's pools as it reports them (else as its spec will: maxNodeCount, else
    nodeCount), each capped by the nodes the binder last counted on the workload cluster
    (capacity follows the nodes that exist); and why each capped pool offers fewer."""
    status = obj.get("status") or {}
    # A pool without a name cannot be pinned to, so it offers nothing.
    spec_pools = [
        p
        for p in (obj.get("spec") or {}).get("nodePools") or []
        if isinstance(p, Mapping) and p.get("name")
    ]
    sized = _sized(status.get("pools"), spec_pools)
    autoscaled = {p["name"] for p in spec_pools if p.get("maxNodeCount") is not None}
    counted = pool_nodes.record_of(obj)
    pools, reduced = [], {}
    for name, class_name, nodes in sized:
        offered, why = pool_nodes.cap(nodes, name in autoscaled, counted, name)
        pools.append(Pool(name, class_name, offered))
        if why:
            reduced[name] = why
    return pools, reduced


def _sized(reported: Any, spec_pools: list[Mapping[str, Any]]) -> list[tuple[str, str, int]]:
    """(name, class, nodes) per pool: as `status.pools` reports them, else as the spec will."""
    if reported:
        return [
            (p["name"], p.get("className") or "", int(p.get("nodeCapacity") or 0))
            for p in reported
            if p.get("name")
        ]
    return [
        (p["name"], p.get("className") or "", int(p.get("maxNodeCount") or p.get("nodeCount") or 0))
        for p in spec_pools
    ]


def class_shape(cls: Mapping[str, Any] | None) -> capacity.Shape:
    """One node of an InferenceClass: its devices by name and, if declared, its CPU and memory."""
    if cls is None:
        return capacity.Shape(())
    spec = cls.get("spec") or {}
    offers: dict[str, int] = {}
    dra: list[tuple[str, str, int]] = []
    synthetic: list[str] = []
    for dev in spec.get("devices") or []:
        key = capacity.device_key(dev.get("name", ""))
        count = int(dev.get("count") or 1)
        offers[key] = offers.get(key, 0) + count
        if dev.get("claim", "DRA") == "Synthetic":
            synthetic.append(key)
        else:
            dra.append((str(dev.get("deviceClassName") or ""), key, count))
    node = spec.get("nodeResources") or {}
    if node.get("cpu") is not None:
        offers[capacity.CPU] = amount(node["cpu"], milli=True)
    if node.get("memory") is not None:
        offers[capacity.MEMORY] = amount(node["memory"], milli=False)
    return capacity.Shape(capacity.vector(offers), tuple(dra), tuple(synthetic))
