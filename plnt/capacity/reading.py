"""Reading the fleet out of the request: only the fields the scheduler uses, converted once.

A 1,000-cluster fleet is most of a RunFunction's time if every object is turned into a dict
whole (`xp.to_dict` goes through protobuf's JSON conversion). Real objects also carry what
the scheduler never reads (managed fields, last-applied annotations, pod templates), so each
kind is read through a *shape*: a dict names the keys to keep, a one-element list applies its
shape to every item, and True keeps the value whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from crossplane.function import response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from plnt import capacity, cluster_health, contracts, xp
from plnt.capacity import binding, fleet_view, ledger_parse, offer, pool_nodes, scheduling
from plnt.capacity.tenant import Tenant

Shape = Any  # dict[str, Shape] | list[Shape] | bool

CLUSTER: Shape = {
    # the binder's published health (plnt.cluster_health): whether its API server answers; and
    # its pools' Ready nodes (plnt.capacity.pool_nodes), which cap what each pool offers
    "metadata": {
        "name": True,
        "labels": True,
        "annotations": {cluster_health.ANNOTATION: True, pool_nodes.ANNOTATION: True},
    },
    "status": {"conditions": True, "pools": True, "gateway": True},
    # the fence (plnt.capacity.admission); which pools autoscale (a node that is gone may come back)
    "spec": {"namespaceSelector": True, "nodePools": [{"name": True, "maxNodeCount": True}]},
}
CLUSTER_SPEC: Shape = {"spec": {"nodePools": True}}  # only read while status has no pools
VIEW_PART: Shape = {"metadata": {"name": True}, "binaryData": True}
INDEX: Shape = {"data": True}
CLASS: Shape = {"metadata": {"name": True}, "spec": {"devices": True, "nodeResources": True}}
REPLICA: Shape = {
    "metadata": {
        "name": True,
        "namespace": True,
        "labels": True,
        "annotations": dict.fromkeys(binding.ANNOTATIONS, True),
    },
    "spec": {
        "clusterName": True,
        "engines": [
            {
                "name": True,
                "copies": True,
                "members": [
                    {"role": True, "worker": True, "nodePoolName": True, "deviceRequests": True}
                ],
            }
        ],
    },
}


def require_all(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    name: str,
    api_version: str,
    kind: str,
    *,
    shape: Shape,
) -> list[dict[str, Any]] | None:
    """Every object of `kind` in every namespace (an empty label selector without a namespace),
    read through `shape`; None until Crossplane has answered. Declared on every call."""
    response.require_resources(rsp, name, api_version, kind, match_labels={})
    rsp.requirements.resources[name].match_labels.SetInParent()
    if name not in req.required_resources:
        return None
    return [read(item.resource, shape) for item in req.required_resources[name].items]


def read(struct: struct_pb2.Struct, shape: Shape) -> dict[str, Any]:
    out = _struct(struct, shape if isinstance(shape, dict) else None)
    if shape is CLUSTER and not (out.get("status") or {}).get("pools"):
        spec = _struct(struct, CLUSTER_SPEC).get("spec") or {}
        out["spec"] = {**(out.get("spec") or {}), **spec}
    return out


def _struct(struct: struct_pb2.Struct, shape: dict[str, Shape] | None) -> dict[str, Any]:
    fields = struct.fields
    if shape is None:
        return {k: _value(v, True) for k, v in fields.items()}
    return {k: _value(fields[k], sub) for k, sub in shape.items() if k in fields}


def _value(value: struct_pb2.Value, shape: Shape) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return _struct(value.struct_value, shape if isinstance(shape, dict) else None)
    if kind == "list_value":
        item_shape = shape[0] if isinstance(shape, list) and shape else True
        return [_value(v, item_shape) for v in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() else number  # as xp.to_dict does
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    return None


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The fleet one reconcile schedules on, read from the binder's fleet view when there is one,
    else from every InferenceCluster and every ModelReplica (a fleet no binder has viewed yet:
    `plnt render`, `crossplane render`, a first install)."""

    clusters: list[offer.Cluster]
    replicas: list[dict[str, Any]]  # without a view: every ModelReplica on the fleet
    views: Mapping[str, fleet_view.ClusterView]  # with a view: its clusters' committed use
    size: int  # clusters on the whole fleet
    viewed: bool  # read from the fleet view
    unreadable: Sequence[str] = ()  # view parts that did not read (read the whole fleet instead)
    # clusters whose InferenceCluster this request holds (found or not): their fence is the
    # object's, as the binder reads it when it commits
    read: frozenset[str] = frozenset()

    @property
    def used(self) -> Mapping[tuple[str, str], tuple[capacity.NodeUse, ...]]:
        return _ViewUse(self.views)

    def counts(self, replica: Any) -> bool:
        """Whether the view already counts this (own, bound) replica's slots."""
        view = self.views.get(replica.cluster)
        return replica.state == binding.BOUND and view is not None and replica.ledger <= view.ledger

    def charged(
        self, own: Iterable[dict[str, Any]], own_placed: Sequence[scheduling.PlacedReplica]
    ) -> tuple[frozenset[tuple[str, str]], list[scheduling.PlacedReplica]]:
        """A deployment's own replicas the view counts, and the replicas the scheduler charges
        besides the view: the view counts what is committed; own replicas it does not, the
        deployment does. Without a view, every replica on the fleet."""
        if not self.viewed:
            return frozenset(), _every_replica(self.replicas, own)
        counted = frozenset((r.namespace, r.name) for r in own_placed if self.counts(r))
        return counted, [r for r in own_placed if (r.namespace, r.name) not in counted]


def _every_replica(
    required: Iterable[dict[str, Any]], own: Iterable[dict[str, Any]]
) -> list[scheduling.PlacedReplica]:
    """Every replica on the fleet: the required ones (read without pod templates) plus the
    deployment's own observed ones (read whole), once each."""
    out: dict[tuple[str, str], scheduling.PlacedReplica] = {}
    for obj in required:
        placed = scheduling.placed_replica(obj, whole_spec=False)
        out[(placed.namespace, placed.name)] = placed
    for obj in own:
        placed = scheduling.placed_replica(obj)
        out[(placed.namespace, placed.name)] = placed
    return list(out.values())


class _ViewUse(Mapping[tuple[str, str], tuple[capacity.NodeUse, ...]]):
    """(cluster, pool) -> its used nodes, read from the view when asked."""

    def __init__(self, views: Mapping[str, fleet_view.ClusterView]) -> None:
        self._views = views

    def __getitem__(self, key: tuple[str, str]) -> tuple[capacity.NodeUse, ...]:
        view = self._views.get(key[0])
        if view is None:
            raise KeyError(key)
        return view.used[key[1]]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return ((name, pool) for name, v in self._views.items() for pool in v.used)

    def __len__(self) -> int:
        return sum(len(v.used) for v in self._views.values())


CLUSTER_BY_NAME = "cluster-"  # requirement name prefix: one InferenceCluster, by name


def snapshot(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    selector_labels: Mapping[str, str],
    own_clusters: Iterable[str],
    fenced: Iterable[str] = (),
) -> Snapshot | None:
    """The fleet for this reconcile, None until Crossplane has answered every requirement.

    With a view: the parts whose labels carry the clusterSelector's matchLabels (but for
    per-cluster labels; the scheduler applies the whole selector), and by name the
    InferenceClusters of this deployment's own replicas that those parts leave out (a pin stays
    while its cluster exists, matching the selector or not). The clusters in `fenced` are read
    by name too, and their fence taken from the object rather than the view, which the binder
    writes after its pass and may predate a fence. Every cluster this request already holds by
    name is asked for again, so what is asked only grows within a reconcile and settles."""
    namespace = fleet_view.NAMESPACE
    response.require_resources(
        rsp, "fleet-view-index", "v1", "ConfigMap",
        match_name=fleet_view.INDEX_NAME, namespace=namespace,
    )  # fmt: skip
    labels = {**fleet_view.shared(selector_labels), fleet_view.VIEW_LABEL: "true"}
    response.require_resources(
        rsp, "fleet-view", "v1", "ConfigMap", match_labels=labels, namespace=namespace
    )
    if (
        "fleet-view-index" not in req.required_resources
        or "fleet-view" not in req.required_resources
    ):
        return None
    index = [read(i.resource, INDEX) for i in req.required_resources["fleet-view-index"].items]
    size = fleet_view.fleet_size(index[0].get("data")) if index else None
    if size is None:
        return _whole_fleet(req, rsp)
    parts = [read(i.resource, VIEW_PART) for i in req.required_resources["fleet-view"].items]
    views, unreadable = fleet_view.read(parts)
    if unreadable:  # what those parts held is unknown: nothing is placed on a guess
        whole = _whole_fleet(req, rsp)
        return whole and dataclasses.replace(whole, unreadable=tuple(unreadable))
    missing = set(own_clusters) - set(views)
    live = clusters_by_name(req, rsp, missing | set(fenced) | held_by_name(req))
    if not missing <= set(live):
        return None
    clusters = []
    for name, v in views.items():
        if name not in live:
            clusters.append(v.cluster)
        elif (found := live[name]) is not None:  # else deleted since the view was written
            clusters.append(dataclasses.replace(v.cluster, fence=found.fence))
    clusters += [c for name in sorted(missing) if (c := live[name]) is not None]
    return Snapshot(clusters, [], views, size, True, read=frozenset(live))


def held_by_name(req: fnv1.RunFunctionRequest) -> set[str]:
    """The clusters this request holds by name (asked for by the previous call)."""
    return {
        n.removeprefix(CLUSTER_BY_NAME)
        for n in req.required_resources
        if n.startswith(CLUSTER_BY_NAME)
    }


def clusters_by_name(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, names: Iterable[str]
) -> dict[str, offer.Cluster | None]:
    """Asks for each InferenceCluster of `names` by name; of those Crossplane has answered, the
    cluster, or None where there is no such InferenceCluster."""
    out: dict[str, offer.Cluster | None] = {}
    for name in sorted(set(names)):
        requirement = f"{CLUSTER_BY_NAME}{name}"
        response.require_resources(
            rsp, requirement, contracts.MODELPLANE_API_VERSION, "InferenceCluster", match_name=name
        )
        if requirement in req.required_resources:
            items = req.required_resources[requirement].items
            out[name] = offer.cluster_of(read(items[0].resource, CLUSTER)) if items else None
    return out


def _whole_fleet(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> Snapshot | None:
    clusters = require_all(
        req, rsp, "inference-clusters", contracts.MODELPLANE_API_VERSION, "InferenceCluster",
        shape=CLUSTER,
    )  # fmt: skip
    replicas = require_all(
        req, rsp, "model-replicas", contracts.MODELPLANE_API_VERSION, "ModelReplica",
        shape=REPLICA,
    )  # fmt: skip
    if clusters is None or replicas is None:
        return None
    parsed = [offer.cluster_of(c) for c in clusters]
    every = frozenset(c.name for c in parsed)
    return Snapshot(parsed, replicas, {}, len(parsed), False, read=every)


NAMESPACE_REQUIREMENT = "namespace"


def tenant(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, namespace: str
) -> Tenant | None:
    """The namespace's Namespace (by name, for the fences) and the binder's quota ledgers; None
    until Crossplane has answered both."""
    ns = xp.require(req, rsp, NAMESPACE_REQUIREMENT, "v1", "Namespace", match_name=namespace)
    ledgers = ledger_parse.require_quota_ledgers(req, rsp)
    if ns is None or ledgers is None:
        return None
    read, _ = ledger_parse.quota_ledgers_in(ledgers)
    return Tenant.of(namespace, ns[0] if ns else None, read)
