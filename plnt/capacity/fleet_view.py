"""The fleet view: the fleet as the ModelDeployment function schedules on it, small enough to carry.

Crossplane answers a required resource with whole objects (managed fields included). Requiring
every InferenceCluster and every ModelReplica made one deployment's request 15.8 MB at 10,000
clusters before counting a single replica, and every deployment's request grew with every
replica on the fleet. The binder, which owns what is committed on each pool (its ledgers), writes
instead what scheduling needs, once per pass:

- per cluster: name, labels, Ready (and, when degraded, why and since when: plnt.cluster_health),
  gateway address, the ledger sequence it counted, and per pool
  its name, class and nodes (capped by the nodes that exist, with why when fewer than its
  spec: plnt.capacity.pool_nodes) with, for used nodes only, what the ledger's slots take on each; a
  cluster whose ledger the binder cannot read carries why instead of usage, and offers nothing
  (the scheduler names the reason in its shortfall);
- in ConfigMaps `<namespace>/plnt-fleet-view-<labels digest>-<n>` (gzipped JSON in binaryData):
  clusters with the same labels share parts, each part labelled with those labels and
  `plnt.work/fleet-view: "true"`, so a clusterSelector's matchLabels narrows the requirement to
  the parts of the clusters it can match (labels every cluster has a value of its own for, such
  as Crossplane's `crossplane.io/composite`, are kept per cluster instead: see `shared`);
- and an index `<namespace>/plnt-fleet-view` (clusters, parts) whose presence says there is a view.

Only committed capacity is counted (every ledger entry, at its exact slots): a replica the
binder has not bound yet is a proposal, counted by the deployment that made it until the binder
answers. A replica bound at ledger sequence s is in a view of that cluster at sequence s or later
(entries leave a ledger only when their replica goes or changes), so a deployment knows which of
its own replicas the view already counts (docs/scheduler.md, "The fleet view").
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import gzip
import hashlib
import json
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from plnt import capacity, cluster_health, names
from plnt.capacity import offer

VIEW_LABEL = "plnt.work/fleet-view"
INDEX_NAME = "plnt-fleet-view"
PART_PREFIX = "plnt-fleet-view"
NAMESPACE = "plnt-system"  # the binder's default namespace, where the function looks
DATA_KEY = "view.json.gz"  # in binaryData: the part's JSON, gzipped
INDEX_KEY = "index.json"
# A part's clusters are cut into ConfigMaps of at most PART_BYTES of JSON, and further while
# their gzip is over PAYLOAD_BYTES (a ConfigMap holds 1 MiB, base64 included).
PART_BYTES = 2 * 1024 * 1024
PAYLOAD_BYTES = 512 * 1024
MAX_TEXT_BYTES = 64 * 1024 * 1024  # what a part may unzip to: anything more is not a part
# Crossplane labels every XR `crossplane.io/composite: <its name>` (and claims' `claim-name`...):
# grouped by those, every cluster would have a part of its own (seen on a live control plane).
PER_CLUSTER_PREFIXES = ("crossplane.io/",)
DECODED_PARTS = 256  # decoded parts a process keeps: a 25,000-cluster fleet-wide view


@dataclasses.dataclass(frozen=True)
class ClusterView:
    cluster: offer.Cluster
    ledger: int  # the ledger sequence the usage was read at
    used: Mapping[str, tuple[capacity.NodeUse, ...]]  # per pool, its used nodes


class _Uses(Mapping[str, tuple[capacity.NodeUse, ...]]):
    """A read part's per-pool usage, decoded when a pool is first read (a fleet-wide read
    decodes 80,000 pools; a deployment reads those of its classes). A pool whose usage does not
    read is taken as full: nothing is placed on what cannot be counted."""

    def __init__(self) -> None:
        self.raw: dict[str, tuple[int, Any]] = {}
        self._read: dict[str, tuple[capacity.NodeUse, ...]] = {}

    def __getitem__(self, pool: str) -> tuple[capacity.NodeUse, ...]:
        if pool not in self._read:
            nodes, raw = self.raw[pool]
            try:
                self._read[pool] = tuple(capacity.NodeUse.from_json(u) for u in raw)
            except (ValueError, TypeError):
                self._read[pool] = tuple(capacity.NodeUse(i, 1, True, ()) for i in range(nodes))
        return self._read[pool]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)


@dataclasses.dataclass(frozen=True)
class Part:
    name: str
    labels: dict[str, str]
    text: str  # the JSON
    names: tuple[str, ...]  # its clusters
    payload: str  # the ConfigMap's binaryData value: `pack(text)`

    @property
    def clusters(self) -> int:
        return len(self.names)


def pack(text: str) -> str:
    """The JSON gzipped (no timestamp, so the same JSON is the same payload and an unchanged part
    is not written again), in base64."""
    return base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()


def unpack(payload: Any) -> str:
    """A part's JSON from its binaryData value; ValueError if it is not one."""
    if not isinstance(payload, str):
        raise ValueError("no fleet view payload")
    try:
        unzip = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
        text = unzip.decompress(base64.b64decode(payload, validate=True), MAX_TEXT_BYTES)
        if unzip.unconsumed_tail or not unzip.eof:
            raise ValueError("truncated, or larger than a part can be")
        return text.decode()
    except (binascii.Error, zlib.error, UnicodeDecodeError) as err:
        raise ValueError(f"not a gzipped fleet view part: {err}") from err


def cluster_view(
    obj: Mapping[str, Any], pools: Mapping[str, capacity.Pool], ledger: int, closed: str = ""
) -> ClusterView:
    """An InferenceCluster and its pools as charged with the ledger's slots; `closed`: why the
    binder commits nothing on it (its ledger cannot be read), so it offers no capacity."""
    cluster = offer.cluster_of(obj)
    if closed:
        cluster = dataclasses.replace(cluster, closed=closed)
    return ClusterView(
        cluster,
        ledger,
        {name: use for name, pool in pools.items() if (use := pool.usage())},
    )


def shared(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels clusters are grouped by, and a clusterSelector's matchLabels narrow parts by:
    all but the per-cluster ones (those the scheduler matches on each cluster's own labels)."""
    return {k: v for k, v in labels.items() if not k.startswith(PER_CLUSTER_PREFIXES)}


def _encode(view: ClusterView, class_index: Mapping[str, int]) -> list[Any]:
    c = view.cluster
    pools = []
    for p in c.pools:
        entry: list[Any] = [p.name, class_index[p.class_name], p.capacity]
        uses = view.used.get(p.name)
        if uses:
            entry.append([u.to_json() for u in uses])
        pools.append(entry)
    encoded = [c.name, int(c.ready), c.gateway, view.ledger, pools]
    own = {k: v for k, v in c.labels.items() if k.startswith(PER_CLUSTER_PREFIXES)}
    if own or c.fence is not None:
        encoded.append(dict(sorted(own.items())))
    if c.fence is not None:  # the fence rides after the own labels (a map, maybe empty)
        encoded.append(dict(c.fence))
    if c.closed:  # last, the only string after the pools
        encoded.append(c.closed)
    return encoded


def labels_digest(labels: Mapping[str, str]) -> str:
    body = json.dumps(dict(sorted(labels.items())), separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:10]


def parts(
    views: Iterable[ClusterView], limit: int = PART_BYTES, payload_limit: int = PAYLOAD_BYTES
) -> list[Part]:
    """The view's ConfigMap parts: clusters grouped by their labels, in name order, each part's
    clusters under `limit` bytes of JSON and `payload_limit` bytes of base64 gzip (a single
    cluster larger than that still gets a part of its own)."""
    groups: dict[str, list[ClusterView]] = {}
    for v in sorted(views, key=lambda v: v.cluster.name):
        groups.setdefault(labels_digest(shared(v.cluster.labels)), []).append(v)
    out: list[Part] = []
    for digest, members in sorted(groups.items()):
        labels = shared(members[0].cluster.labels)
        classes = sorted({p.class_name for v in members for p in v.cluster.pools})
        index = {name: i for i, name in enumerate(classes)}
        chunks = _chunks(members, index, limit)
        notes = _Notes(
            {v.cluster.name: v.cluster.degraded for v in members if v.cluster.degraded},
            {v.cluster.name: v.cluster.reduced for v in members if v.cluster.reduced},
        )
        head = json.dumps({"labels": labels, "classes": classes}, separators=(",", ":"))
        fitted = [f for chunk in chunks for f in _fitted(head, chunk, payload_limit, notes)]
        for n, (text, cluster_names, payload) in enumerate(fitted):
            name = names.dns_subdomain(PART_PREFIX, f"{digest}-{n}")
            out.append(Part(name, {**labels, VIEW_LABEL: "true"}, text, cluster_names, payload))
    return out


def _chunks(
    members: list[ClusterView], index: Mapping[str, int], limit: int
) -> list[list[tuple[str, str]]]:
    """The clusters' JSON, (name, JSON) each, in runs of under `limit` bytes (a cluster larger
    than that alone in its run)."""
    chunks: list[list[tuple[str, str]]] = [[]]
    size = 0
    for v in members:
        encoded = json.dumps(_encode(v, index), separators=(",", ":"))
        if chunks[-1] and size + len(encoded) > limit:
            chunks.append([])
            size = 0
        chunks[-1].append((v.cluster.name, encoded))
        size += len(encoded) + 1
    return chunks


@dataclasses.dataclass(frozen=True)
class _Notes:
    """What rides beside a part's clusters, for the few it concerns: the degraded ones (why and
    since when) and the pools offering fewer nodes than their spec (why)."""

    degraded: Mapping[str, cluster_health.Degraded]
    reduced: Mapping[str, Mapping[str, str]]


def _fitted(
    head: str, chunk: list[tuple[str, str]], payload_limit: int, notes: _Notes
) -> list[tuple[str, tuple[str, ...], str]]:
    """The chunk's (text, cluster names, payload), halved until each payload is under the limit
    (a single cluster over it keeps a part of its own). The degraded clusters of the chunk ride
    in a map of their own, `degraded` (name: [since, reason, message]), and the reduced pools in
    `reduced` (name: {pool: why}), which readers that do not know them pass over."""
    text = head[:-1] + ',"clusters":[' + ",".join(encoded for _, encoded in chunk) + "]"
    mine = {
        n: [int(d.since), d.reason, d.message] for n, _ in chunk if (d := notes.degraded.get(n))
    }
    if mine:
        text += ',"degraded":' + json.dumps(mine, sort_keys=True, separators=(",", ":"))
    reduced = {n: dict(r) for n, _ in chunk if (r := notes.reduced.get(n))}
    if reduced:
        text += ',"reduced":' + json.dumps(reduced, sort_keys=True, separators=(",", ":"))
    text += "}"
    payload = pack(text)
    if len(chunk) == 1 or len(payload) <= payload_limit:
        return [(text, tuple(name for name, _ in chunk), payload)]
    half = len(chunk) // 2
    return _fitted(head, chunk[:half], payload_limit, notes) + _fitted(
        head, chunk[half:], payload_limit, notes
    )


def index_text(all_parts: Sequence[Part]) -> str:
    return json.dumps(
        {"clusters": sum(p.clusters for p in all_parts), "parts": [p.name for p in all_parts]},
        separators=(",", ":"),
    )


def fleet_size(index_data: Mapping[str, Any] | None) -> int | None:
    """The clusters the index counts, None if it does not read as an index."""
    try:
        clusters = json.loads((index_data or {}).get(INDEX_KEY, ""))["clusters"]
    except (ValueError, TypeError, KeyError):
        return None
    return clusters if type(clusters) is int and clusters >= 0 else None


@functools.lru_cache(maxsize=DECODED_PARTS)
def _decoded(payload: str) -> list[ClusterView]:
    """Every deployment reads the same parts: a function server decodes each version once."""
    return decode(unpack(payload))


def decode(text: str) -> list[ClusterView]:
    """One part's clusters from its JSON; ValueError if it is not a part."""
    try:
        raw = json.loads(text)
        labels = {str(k): str(v) for k, v in raw["labels"].items()}
        classes = [str(c) for c in raw["classes"]]
        degraded = {
            str(n): cluster_health.Degraded(float(d[0]), str(d[1]), str(d[2]))
            for n, d in (raw.get("degraded") or {}).items()
        }
        reduced = {
            str(n): {str(p): str(why) for p, why in r.items()}
            for n, r in (raw.get("reduced") or {}).items()
        }
        out = []
        for name, ready, gateway, ledger, pools, *rest in raw["clusters"]:
            fleet_pools, used = _decode_pools(pools, classes)
            closed, fence, own = _decode_rest(name, rest)
            cluster_labels = (
                {**labels, **{str(k): str(v) for k, v in own[0].items()}} if own else labels
            )
            cluster = offer.Cluster(
                str(name),
                cluster_labels,
                bool(ready),
                tuple(fleet_pools),
                str(gateway),
                fence,
                closed,
                degraded.get(str(name)),
                reduced.get(str(name)) or {},
            )
            out.append(ClusterView(cluster, int(ledger), used))
        return out
    except (KeyError, IndexError, TypeError, AttributeError) as err:
        raise ValueError(f"not a fleet view part: {err}") from err


def _decode_pools(pools: Any, classes: list[str]) -> tuple[list[offer.Pool], _Uses]:
    """A cluster's pools ([name, class index, nodes, used nodes?]) and what is used on them."""
    fleet_pools = []
    used = _Uses()
    for entry in pools:
        if int(entry[1]) < 0:
            raise IndexError(f"class index {entry[1]}")
        pool, cls, nodes = str(entry[0]), classes[int(entry[1])], int(entry[2])
        fleet_pools.append(offer.Pool(pool, cls, nodes))
        if len(entry) > 3:
            if not all(_node_use_shaped(u) for u in entry[3]):
                raise TypeError(f"pool {pool}: a used node is not [node, pods, whole, {{...}}]")
            used.raw[pool] = (nodes, entry[3])
    return fleet_pools, used


def _decode_rest(name: Any, rest: list[Any]) -> tuple[str, Any, list[Any]]:
    """What follows a cluster's pools, each part optional: its own labels, its fence, and why
    it is closed: (closed, fence, [own labels] or [])."""
    closed = ""
    if rest and type(rest[-1]) is str:
        closed = rest.pop()
    fence, own = None, rest
    if len(rest) == 2 and type(rest[1]) is dict:
        fence, own = rest[1], rest[:1]
    if len(own) > 1 or (own and type(own[0]) is not dict):
        raise TypeError(f"cluster {name}: its own labels are not one map")
    return closed, fence, own


def _node_use_shaped(raw: Any) -> bool:
    """The shape `capacity.NodeUse.to_json` writes, checked when a part is read so that a part
    that does not read is reported (its values are read when a pool is)."""
    return type(raw) is list and len(raw) == 4 and type(raw[3]) is dict


def cluster_names(payload: Any) -> set[str]:
    """The clusters a part's binaryData value holds (none if it does not read)."""
    try:
        return {str(c[0]) for c in json.loads(unpack(payload))["clusters"]}
    except (ValueError, TypeError, KeyError, IndexError):
        return set()


def read(configmaps: Iterable[Mapping[str, Any]]) -> tuple[dict[str, ClusterView], list[str]]:
    """Every cluster of the parts (by name; a cluster in two parts, as while the binder moves it
    between label sets, is taken at the later ledger sequence) and the parts that did not read.
    The views are shared between calls: do not mutate them."""
    out: dict[str, ClusterView] = {}
    bad = []
    for cm in configmaps:
        name = (cm.get("metadata") or {}).get("name", "")
        data = cm.get("binaryData")
        payload = data.get(DATA_KEY) if isinstance(data, dict) else None
        try:
            if not isinstance(payload, str):
                raise ValueError(f"no binaryData {DATA_KEY}")
            views = _decoded(payload)
        except ValueError:
            bad.append(name)
            continue
        for v in views:
            seen = out.get(v.cluster.name)
            if seen is None or v.ledger > seen.ledger:
                out[v.cluster.name] = v
    return out, bad


def configmaps(all_parts: Sequence[Part], namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The parts and the index as the ConfigMaps the binder writes (for offline requests)."""
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": p.name, "namespace": namespace, "labels": p.labels},
            "binaryData": {DATA_KEY: p.payload},
        }
        for p in all_parts
    ]
    out.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": INDEX_NAME, "namespace": namespace},
            "data": {INDEX_KEY: index_text(all_parts)},
        }
    )
    return out
