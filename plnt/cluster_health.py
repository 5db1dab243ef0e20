"""A workload cluster's health as plnt observes it: what the binder publishes, what functions read.

The reconciler probes each InferenceCluster's workload API server (`GET /readyz`, a short
timeout, the kubeconfig Secret the cluster references) and publishes what it saw on the
InferenceCluster itself, in the annotation `plnt.work/cluster-health`:

    {"state": "Unreachable", "reason": "TimedOut", "message": "...", "since": "2026-...Z"}

`state` is `Reachable` or `Unreachable`; `since` is when the state began (the first failed probe
of the run that made it Unreachable), kept across reconciler restarts by reading it back. An
InferenceCluster is cluster-scoped: only the platform (and Crossplane) can write it, so a tenant
cannot forge its health. The annotation is the truth the InferenceCluster function, the binder's
fleet view and, without a view, the ModelDeployment function read; replicas are only nudged with
a copy of its state (`REPLICA_NUDGE`) so that their ModelDeployments reconcile at once, and that
copy is never read as health.

`degradation` is what the scheduler calls a degraded cluster: its API server does not answer
(the annotation), or its InferenceCluster is not Ready (since the Ready condition's last
transition). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from typing import Any

ANNOTATION = "plnt.work/cluster-health"
# On a ModelReplica: the health of its cluster as the binder last nudged it (a trigger only).
REPLICA_NUDGE = "plnt.work/cluster-health"
REACHABLE = "Reachable"
UNREACHABLE = "Unreachable"
# reasons a probe fails
TIMED_OUT = "TimedOut"  # no answer within the probe's timeout (a hung or stopped API server)
REFUSED = "ConnectionRefused"  # nothing listens
NOT_READY = "NotReady"  # /readyz answered, but not 200
UNREACHABLE_REASON = "Unreachable"  # anything else: DNS, TLS, a reset connection
NOT_READY_CONDITION = "ClusterNotReady"  # a degradation read from the Ready condition
MESSAGE_MAX = 300


@dataclasses.dataclass(frozen=True)
class Record:
    """The published health of one cluster."""

    reachable: bool
    reason: str
    message: str
    since: str  # RFC 3339, UTC

    def to_annotation(self) -> str:
        return json.dumps(
            {
                "state": REACHABLE if self.reachable else UNREACHABLE,
                "reason": self.reason,
                "message": self.message,
                "since": self.since,
            },
            sort_keys=True,
            separators=(",", ":"),
        )


def parse(raw: Any) -> Record | None:
    """The annotation's record; None when absent or not one (read as: not probed)."""
    if not isinstance(raw, str):
        return None
    try:
        doc = json.loads(raw)
        state, since = doc["state"], doc["since"]
        if state not in (REACHABLE, UNREACHABLE) or seconds(since) is None:
            return None
        return Record(state == REACHABLE, str(doc.get("reason", "")), str(doc.get("message", "")),
                      since)  # fmt: skip
    except (ValueError, TypeError, KeyError):
        return None


def record_of(obj: Mapping[str, Any] | None) -> Record | None:
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return parse(annotations.get(ANNOTATION)) if isinstance(annotations, Mapping) else None


def timestamp(epoch: float) -> str:
    moment = datetime.datetime.fromtimestamp(int(epoch), datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds(stamp: Any) -> float | None:
    """An RFC 3339 time as seconds since the epoch; None if it is not one."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        moment = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


@dataclasses.dataclass(frozen=True)
class Degraded:
    """Why a cluster is degraded and since when (seconds since the epoch)."""

    since: float
    reason: str
    message: str

    def describe(self) -> str:
        return f"{self.reason}: {self.message} (since {timestamp(self.since)})"


def degradation(obj: Mapping[str, Any]) -> Degraded | None:
    """An InferenceCluster's degradation: its API server not answering (the published record),
    else its Ready condition False since its last transition; None when healthy."""
    record = record_of(obj)
    if record is not None and not record.reachable:
        since = seconds(record.since)
        assert since is not None  # parse checked it
        return Degraded(since, record.reason, f"API server not answering: {record.message}")
    for cond in ((obj.get("status") or {}).get("conditions")) or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            if cond.get("status") == "True":
                return None
            since = seconds(cond.get("lastTransitionTime"))
            if since is None:
                return None  # never Ready (being provisioned) or no time: not a degradation
            why = str(cond.get("message") or cond.get("reason") or "not Ready")
            return Degraded(since, NOT_READY_CONDITION, f"InferenceCluster not Ready: {why}")
    return None


def nudge(degraded: Degraded | None, *, ledger_closed: bool = False) -> str:
    """What the binder writes on a replica of a cluster so that it and its ModelDeployment
    reconcile when the cluster's health, or whether its ledger reads, changes: a token of the
    state, nothing more."""
    token = "healthy" if degraded is None else f"degraded-{int(degraded.since)}-{degraded.reason}"
    return f"{token}-ledger-closed" if ledger_closed else token
