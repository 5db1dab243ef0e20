"""One reconcile pass over every autoscaled ModelDeployment, and the interval loop around it.

A pass reads all token rates with one pair of queries, then for each ModelDeployment that asks
for autoscaling: reads its scale subresource, decides, writes spec.replicas if the decision
changes it, and records the decision. Recording (an Event and the `plnt.work/autoscale`
annotation) happens when the decision differs from the one already on the object (from, to or
why), so a steady deployment is not re-annotated, and its composite not re-reconciled, every
interval; every decision is still logged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from plnt_reconciler import kube as k8s
from plnt_reconciler.decision import Decision, Policy, RecommendationHistory, decide
from plnt_reconciler.metrics import Readings

log = logging.getLogger(__name__)

# Scale writes retried after a 409 (a status write moved the resourceVersion) per pass.
SCALE_CONFLICT_RETRIES = 3


class Cluster(Protocol):
    def read_scale(self, namespace: str, name: str) -> k8s.Scale: ...
    def patch_scale(
        self, namespace: str, name: str, replicas: int, resource_version: str
    ) -> int: ...
    def annotate(self, namespace: str, name: str, decision: Decision) -> None: ...
    def event(self, md: dict[str, Any], decision: Decision) -> Any: ...


class Metrics(Protocol):
    def read(self) -> Readings: ...


@dataclass
class Outcome:
    namespace: str
    name: str
    decision: Decision | None = None
    applied: bool = False  # spec.replicas was written
    recorded: bool = False  # an Event and the annotation were written
    error: str = ""

    def line(self) -> str:
        who = f"{self.namespace}/{self.name}"
        if self.decision is None:
            return f"{who}: skipped: {self.error}"
        d = self.decision
        rate = "n/a" if d.rate is None else f"{d.rate:.1f}"
        text = (
            f"{who}: {d.from_replicas} -> {d.to_replicas} ({d.reason}) "
            f"rate={rate} target={d.target}: {d.message}"
        )
        return f"{text} [error: {self.error}]" if self.error else text


def _recorded(md: dict[str, Any]) -> tuple[Any, ...] | None:
    raw = (md.get("metadata", {}).get("annotations") or {}).get(k8s.ANNOTATION)
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return (value.get("from"), value.get("to"), value.get("why")) if value else None


class Reconciler:
    def __init__(
        self,
        cluster: Cluster,
        metrics: Metrics,
        policy: Policy,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.metrics = metrics
        self.policy = policy
        self.clock = clock
        self.history = RecommendationHistory(policy.stabilization_seconds)

    def reconcile(self, items: list[dict[str, Any]]) -> list[Outcome]:
        readings = self.metrics.read()
        if readings.error:
            log.warning("querying token rates failed: %s", readings.error)
        now = self.clock()
        outcomes = [self._one(md, readings, now) for md in items]
        self.history.forget_all_but([(o.namespace, o.name) for o in outcomes if o.decision])
        return outcomes

    def _one(self, md: dict[str, Any], readings: Readings, now: float) -> Outcome:
        meta = md.get("metadata", {})
        out = Outcome(meta.get("namespace", ""), meta.get("name", ""))
        try:
            wanted = k8s.autoscaled(md, replicas=0)
        except k8s.InvalidAutoscalingError as err:
            out.error = f"invalid autoscaling: {err}"
            log.warning("%s", out.line())
            return out
        if wanted is None:
            out.error = "no spec.autoscaling.targetTokensPerSecond"
            return out
        try:
            scale = self.cluster.read_scale(out.namespace, out.name)
        except Exception as err:  # one deployment's failure must not stop the pass
            out.error = f"reading scale: {k8s.api_error(err)}"
            log.warning("%s", out.line())
            return out
        current = dataclasses.replace(wanted, replicas=scale.replicas)
        decision = decide(
            current,
            readings.observation(current.key),
            self.policy,
            self.history.window(current.key, now),
        )
        self.history.apply(current.key, now, decision)
        out.decision = decision
        if decision.changed:
            try:
                self._write_scale(out.namespace, out.name, decision, scale)
                out.applied = True
            except Exception as err:
                out.error = f"writing scale: {k8s.api_error(err)}"
                log.warning("%s", out.line())
                return out
        if _recorded(md) != (decision.from_replicas, decision.to_replicas, str(decision.reason)):
            try:
                self.cluster.event(md, decision)
                self.cluster.annotate(out.namespace, out.name, decision)
                out.recorded = True
            except Exception as err:
                out.error = f"recording decision: {k8s.api_error(err)}"
        level = logging.WARNING if decision.warning or out.error else logging.INFO
        log.log(level, "%s", out.line())
        return out

    def _write_scale(self, namespace: str, name: str, decision: Decision, scale: k8s.Scale) -> None:
        """Writes the decision with the resourceVersion read. Crossplane writes the XR's status
        often, and each write moves the resourceVersion the scale write is conditioned on: on a
        409 re-read, and write again only while spec.replicas is still what was decided from
        (someone else's scale is never overwritten; the next pass decides from it)."""
        for attempt in range(SCALE_CONFLICT_RETRIES + 1):
            try:
                self.cluster.patch_scale(
                    namespace, name, decision.to_replicas, scale.resource_version
                )
                return
            except Exception as err:
                if getattr(err, "status", None) != 409 or attempt == SCALE_CONFLICT_RETRIES:
                    raise
            scale = self.cluster.read_scale(namespace, name)
            if scale.replicas != decision.from_replicas:
                raise ScaleMovedError(
                    f"spec.replicas moved from {decision.from_replicas} to {scale.replicas} "
                    "while deciding; left as it is"
                )


class ScaleMovedError(Exception):
    """spec.replicas changed between the read the decision came from and its write."""


@dataclass
class Heartbeat:
    """What the health endpoint reports: has the loop started, and is it still turning."""

    interval: float
    clock: Callable[[], float] = time.monotonic
    last_pass: float | None = None
    ready: threading.Event = dataclasses.field(default_factory=threading.Event)

    def beat(self) -> None:
        self.last_pass = self.clock()
        self.ready.set()

    def alive(self) -> bool:
        if self.last_pass is None:
            return True  # still starting: readiness, not liveness, says so
        return self.clock() - self.last_pass <= max(3 * self.interval, 60.0)


def run(
    reconciler: Reconciler,
    source: Callable[[], list[dict[str, Any]]],
    interval: float,
    stop: threading.Event,
    heartbeat: Heartbeat | None = None,
) -> None:
    """Reconcile every `interval` seconds until `stop` is set."""
    while not stop.is_set():
        started = time.monotonic()
        try:
            reconciler.reconcile(source())
            if heartbeat:
                heartbeat.beat()
        except Exception:
            log.exception("reconcile pass failed")
        stop.wait(max(0.0, interval - (time.monotonic() - started)))
