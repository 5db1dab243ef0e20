"""The nodes a workload cluster's pools really have, so capacity follows the nodes that exist.

An InferenceCluster's spec says how many nodes each pool has (`nodeCount`) or may grow to
(`maxNodeCount`); a node that is gone, NotReady or cordoned offers nothing, whatever the spec
says. The reconciler's prober (plnt_reconciler.probe) lists the Nodes of each workload cluster
that carry the pool label (`modelplane.ai/pool`, docs/inference-cluster.md) each time the cluster
answers its probe, counts per pool the nodes that exist and those that are Ready (`count`), and
the binder publishes the counts on the InferenceCluster, in the annotation
`plnt.work/ready-nodes`, when they change:

    {"pools": {"h100": [3, 4]}, "since": "2026-...Z"}            # [ready, existing]
    {"pools": {...}, "since": "...", "error": "listing Nodes: HTTP 403"}

`since` is when the counts took these values. `error` says why the last reading failed; the
counts then stand as last observed (`publish`), and so they do while the cluster does not
answer at all (its health, plnt.cluster_health, says so: it is not Ready, so nothing new is
placed on it anyway). A cluster none of whose nodes ever carried the pool label is not counted
(its pools offer what the spec says); once it was, a pool with no labelled node offers nothing.

`cap` is what every reader of capacity uses (plnt.capacity.offer, hence the scheduler, the
binder and the fleet view): a fixed pool offers min(nodeCount, Ready nodes); an autoscaled pool
(one with `maxNodeCount`) offers maxNodeCount less its nodes that exist but are not Ready (a
node that is gone is one the autoscaler may add again; one that is there and not Ready holds
its place).
Capacity that shrinks below what is bound never unbinds anything: the binder reports the
replicas beyond it as over-committed and commits nothing new on the pool until it fits again
(docs/scheduler.md, "Capacity follows the nodes"). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from plnt import cluster_health, labels

ANNOTATION = "plnt.work/ready-nodes"
ERROR_MAX = 200


@dataclasses.dataclass(frozen=True)
class Node:
    """What capacity needs of one Node: its pool and whether it takes new pods."""

    pool: str
    ready: bool  # Ready True, not cordoned, not being deleted


def node_of(obj: Mapping[str, Any]) -> Node | None:
    """A Node (as the API serves it, a dict) of some pool; None when it carries no pool label."""
    meta = obj.get("metadata") or {}
    pool = (meta.get("labels") or {}).get(labels.POOL)
    if not isinstance(pool, str) or not pool:
        return None
    spec = obj.get("spec") or {}
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )
    return Node(pool, ready and not spec.get("unschedulable") and not meta.get("deletionTimestamp"))


Counts = Mapping[str, tuple[int, int]]  # pool -> (ready, existing)


def count(nodes: Iterable[Node]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for n in nodes:
        ready, existing = out.get(n.pool, (0, 0))
        out[n.pool] = (ready + int(n.ready), existing + 1)
    return dict(sorted(out.items()))


@dataclasses.dataclass(frozen=True)
class Observation:
    """One reading of a cluster's Nodes: the counts, or why they could not be read."""

    at: float  # when it was read (seconds since the epoch)
    counts: Counts | None = None
    error: str = ""


@dataclasses.dataclass(frozen=True)
class Record:
    """The published counts of one cluster."""

    pools: Counts
    since: str  # RFC 3339, UTC: when the counts took these values
    error: str = ""  # why the last reading failed (the counts stand as last observed)

    def to_annotation(self) -> str:
        doc: dict[str, Any] = {
            "pools": {p: list(c) for p, c in sorted(self.pools.items())},
            "since": self.since,
        }
        if self.error:
            doc["error"] = self.error
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def parse(raw: Any) -> Record | None:
    """The annotation's record; None when absent or not one (read as: not counted)."""
    if not isinstance(raw, str):
        return None
    try:
        doc = json.loads(raw)
        since = doc["since"]
        if cluster_health.seconds(since) is None or not isinstance(doc["pools"], dict):
            return None
        pools: dict[str, tuple[int, int]] = {}
        for pool, pair in doc["pools"].items():
            ready, existing = (int(v) for v in pair)
            if not 0 <= ready <= existing:
                return None
            pools[str(pool)] = (ready, existing)
        return Record(pools, since, str(doc.get("error") or ""))
    except (ValueError, TypeError, KeyError):
        return None


def record_of(obj: Mapping[str, Any] | None) -> Record | None:
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return parse(annotations.get(ANNOTATION)) if isinstance(annotations, Mapping) else None


def publish(previous: Record | None, seen: Observation | None) -> Record | None:
    """The record to publish given the one published (read back from the cluster) and the last
    reading: new counts replace the old (since now); a failed reading keeps the counts with
    why; a reading with no labelled node on a cluster never counted publishes nothing."""
    if seen is None:
        return previous
    if seen.counts is None:
        if previous is None:
            return None  # never counted: the spec stands, the prober's log says why
        error = seen.error[:ERROR_MAX]
        return previous if previous.error == error else dataclasses.replace(previous, error=error)
    counts = dict(sorted(seen.counts.items()))
    if previous is None and not counts:
        return None
    if previous is not None and dict(previous.pools) == counts:
        return previous if not previous.error else dataclasses.replace(previous, error="")
    return Record(counts, cluster_health.timestamp(seen.at))


def cap(spec_nodes: int, autoscaled: bool, record: Record | None, pool: str) -> tuple[int, str]:
    """The nodes a pool offers, and why fewer than its spec says ('' when not fewer)."""
    if record is None:
        return spec_nodes, ""
    ready, existing = record.pools.get(pool, (0, 0))
    offered = spec_nodes - (existing - ready) if autoscaled else ready
    offered = max(0, min(spec_nodes, offered))
    if offered >= spec_nodes:
        return spec_nodes, ""
    if autoscaled:
        why = f"{existing - ready} of its {existing} nodes not Ready (autoscaled to {spec_nodes})"
    else:
        why = f"{ready} of {spec_nodes} nodes Ready ({existing} exist)"
    why += f" on the workload cluster since {record.since}"
    if record.error:
        why += f"; counts as last observed, the last reading failed: {record.error}"
    return offered, why
