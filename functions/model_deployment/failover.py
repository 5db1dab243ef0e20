"""Failover: which replicas sit on a degraded cluster, since when, which are past the grace
period, and what becomes of them. Pure: no protobuf, no clock (`now` is given).

A replica is degraded while its cluster is (plnt.cluster_health: its API server does not answer
the binder's probes, or its InferenceCluster is not Ready), since the cluster's degradation
began; or, on a cluster that is not degraded, while its pods stay unschedulable (its
ModelReplica not Ready, WorkloadsReady reason Unschedulable with the kube-scheduler's words:
its pool lost the nodes it ran on, say), since its WorkloadsReady turned so. Past the
deployment's grace period (`spec.failover.after`; 0 turns failover off) it *fails over*: the
scheduler counts it as gone, so a replacement is placed on a healthy cluster like any new
replica, but it is **held** (kept, not deleted: its cluster may be unreachable, not gone, and
its pods may still serve) while the deployment's healthy replicas that serve are fewer than
wanted; each replacement that serves releases one held replica, lowest index last. When the
cluster comes back, its replicas are healthy again and whatever is then beyond `spec.replicas`
is retired by the scheduler's usual order (replicas on clusters not Ready first, then those that
do not serve, then the highest index), so a starting replacement goes before a serving replica
and the replicas that serve never drop below what they were (`scheduling.keep_pins`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from plnt import cluster_health, conditions
from plnt.capacity.offer import Cluster

# Each degraded replica's message names at most this many; the rest are counted
SHOWN = 5


@dataclasses.dataclass(frozen=True)
class Degraded:
    """A replica on a degraded cluster."""

    replica: str
    cluster: str
    since: float
    reason: str
    message: str
    due: float | None  # when it fails over (None: failover is off)

    def failed(self, now: float) -> bool:
        return self.due is not None and now >= self.due


@dataclasses.dataclass(frozen=True)
class Stuck:
    """A replica whose pods the kube-scheduler cannot place."""

    since: float | None  # when its WorkloadsReady turned Unschedulable (None: not on record)
    message: str  # WorkloadsReady's message: the engine, the pod and the scheduler's words


def stuck(obj: Mapping[str, Any] | None) -> Stuck | None:
    """The replica's pods stay unschedulable: its observed ModelReplica is not Ready and its
    WorkloadsReady is False with reason Unschedulable. None otherwise."""
    found = {}
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") in ("Ready", conditions.WORKLOADS_READY):
            found[c["type"]] = c
    ready, workloads = found.get("Ready") or {}, found.get(conditions.WORKLOADS_READY) or {}
    if ready.get("status") == "True" or workloads.get("status") != "False":
        return None
    if workloads.get("reason") != conditions.UNSCHEDULABLE:
        return None
    since = cluster_health.seconds(workloads.get("lastTransitionTime"))
    return Stuck(since, str(workloads.get("message") or ""))


def degraded(
    own: Iterable[tuple[str, str]],
    clusters: Mapping[str, Cluster],
    after: float,
    stuck: Mapping[str, Stuck] | None = None,
) -> list[Degraded]:
    """The (replica, cluster) pairs whose cluster is degraded, or whose pods are `stuck` on a
    cluster that is not, by replica name. A cluster not Ready with no time on record (no Ready
    condition at all), or a stuck replica with none, is degraded but never fails over: how long
    it has been is unknown."""
    out = []
    for replica, name in sorted(own):
        cluster = clusters.get(name)
        if cluster is None:
            continue
        if cluster.ready:
            pods = (stuck or {}).get(replica)
            if pods is None:
                continue
            due = pods.since + after if after > 0 and pods.since is not None else None
            out.append(
                Degraded(
                    replica, name, pods.since or 0.0, conditions.UNSCHEDULABLE, pods.message, due
                )
            )
            continue
        if cluster.degraded is None:
            out.append(Degraded(replica, name, 0.0, "NotReady", "no Ready condition", None))
            continue
        why = cluster.degraded
        due = why.since + after if after > 0 else None
        out.append(Degraded(replica, name, why.since, why.reason, why.message, due))
    return out


def failed(found: Sequence[Degraded], now: float) -> frozenset[str]:
    """The replicas past their grace period: the scheduler replaces them."""
    return frozenset(d.replica for d in found if d.failed(now))


def next_due(found: Sequence[Degraded], now: float) -> float | None:
    """Seconds until the next replica's grace period ends (None: none is waiting)."""
    waits = [d.due - now for d in found if d.due is not None and d.due > now]
    return min(waits) if waits else None


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    minutes, secs = divmod(seconds, 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def describe(
    found: Sequence[Degraded],
    now: float,
    *,
    held: Iterable[str],
    released: Iterable[str],
    replacements: Mapping[str, str],
    after: float,
) -> tuple[str, str]:
    """ClustersHealthy's reason and message: each degraded replica, its cluster and why, and
    where its failover stands (`replacements`: degraded replica -> "r on c (serving)");
    ('', '') when none is degraded and none was released."""
    held, released = set(held), set(released)
    lines = []
    for d in found[:SHOWN]:
        since = f", since {cluster_health.timestamp(d.since)}" if d.since else ""
        head = f"{d.replica} on {d.cluster} ({d.reason}: {d.message}{since})"
        to = replacements.get(d.replica, "no replacement placed yet")
        if d.replica in released:
            lines.append(f"{head}: failed over to {to}; released")
        elif d.replica in held:
            lines.append(f"{head}: failing over to {to}; kept until it serves")
        elif d.due is None:
            lines.append(f"{head}: {_serves_not(d)}; failover is off")
        else:
            lines.append(f"{head}: {_serves_not(d)}; fails over in {_age(d.due - now)}")
    if len(found) > SHOWN:
        lines.append(f"and {len(found) - SHOWN} more")
    if not lines:
        return "", ""
    said = "; ".join(lines)
    if held:
        return FAILING_OVER, said
    if released:
        return FAILED_OVER, said
    if all(d.reason == conditions.UNSCHEDULABLE for d in found):
        return conditions.UNSCHEDULABLE, said
    return CLUSTER_DEGRADED, said


def _serves_not(d: Degraded) -> str:
    """What a degraded replica lacks: on a degraded cluster its endpoint leaves the routes;
    with unschedulable pods on a healthy one it keeps it, and does not serve."""
    return "not serving" if d.reason == conditions.UNSCHEDULABLE else "no endpoint"


CLUSTER_DEGRADED = "ClusterDegraded"
FAILING_OVER = "FailingOver"  # replacements are placed or start; the degraded replicas are held
FAILED_OVER = "FailedOver"  # the degraded replicas are released: their replacements serve
