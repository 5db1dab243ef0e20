"""The scaling decision: pure, so every rule is a row in a table test.

desired = ceil(rate / target), clamped to [min, max]. Scaling up happens at once, at most
`max_step` replicas per decision, because an overloaded deployment hurts users now. Scaling
down waits, like the HorizontalPodAutoscaler: the reconciler keeps each deployment's recent
recommendations and scales down only to the highest one seen within the stabilization window,
so a short dip never removes capacity. Unlike the HPA it also demands a *continuous* window of
evidence: when metrics go missing or a canary runs, the history restarts (see
`RecommendationHistory.reset`), and until it again spans the window the current count counts
as a recommendation. It fails safe: no metrics, stale metrics, a failed query or a canary in
progress keep the current count.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class Reason(StrEnum):
    """Why a decision came out as it did: the `why` in Events and the annotation."""

    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    STEADY = "Steady"
    STABILIZING = "ScaleDownStabilizing"
    CANARY = "CanaryInProgress"
    METRICS_MISSING = "MetricsMissing"
    METRICS_STALE = "MetricsStale"
    QUERY_FAILED = "MetricsQueryFailed"


# Reasons that keep the count because the reconciler cannot trust what it sees: warnings.
UNSAFE = frozenset({Reason.METRICS_MISSING, Reason.METRICS_STALE, Reason.QUERY_FAILED})


class MetricsStatus(StrEnum):
    OK = "ok"
    MISSING = "missing"
    STALE = "stale"
    FAILED = "failed"


METRICS_REASON = {
    MetricsStatus.MISSING: Reason.METRICS_MISSING,
    MetricsStatus.STALE: Reason.METRICS_STALE,
    MetricsStatus.FAILED: Reason.QUERY_FAILED,
}


@dataclass(frozen=True)
class Policy:
    max_step: int = 4
    stabilization_seconds: float = 300.0


@dataclass(frozen=True)
class Deployment:
    """What the decision needs to know about one ModelDeployment."""

    namespace: str
    name: str
    replicas: int  # the scale subresource's spec.replicas: the count we would change
    min_replicas: int
    max_replicas: int
    target_tokens_per_second: float
    canary: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class Observation:
    """The generated-token rate of one deployment, or why there is none."""

    status: MetricsStatus
    rate: float | None = None
    detail: str = ""

    @classmethod
    def ok(cls, rate: float) -> Observation:
        return cls(MetricsStatus.OK, rate)


@dataclass(frozen=True)
class Window:
    """Recommendations made within the stabilization window, oldest first.

    `complete` is True when the history is continuous for the whole window; when it is not,
    the reconciler has not yet seen the rate stay low for long enough to scale down.
    """

    recommendations: tuple[int, ...] = ()
    complete: bool = False


@dataclass(frozen=True)
class Decision:
    from_replicas: int
    to_replicas: int
    rate: float | None
    target: float
    reason: Reason
    message: str
    recommendation: int | None = None  # clamped ceil(rate/target); None without a usable rate

    @property
    def changed(self) -> bool:
        return self.to_replicas != self.from_replicas

    @property
    def warning(self) -> bool:
        return self.reason in UNSAFE

    def annotation(self) -> dict[str, object]:
        """The `plnt.work/autoscale` annotation value (serialised as JSON by the caller)."""
        return {
            "rate": None if self.rate is None else round(self.rate, 3),
            "target": self.target,
            "from": self.from_replicas,
            "to": self.to_replicas,
            "why": str(self.reason),
            "message": self.message,
        }


def _replicas(n: int) -> str:
    return f"{n} replica" if n == 1 else f"{n} replicas"


def recommend(rate: float, target: float, low: int, high: int) -> int:
    """ceil(rate / target) clamped to [low, high]."""
    raw = math.ceil(rate / target) if rate > 0 else 0
    return max(low, min(high, raw))


def decide(md: Deployment, seen: Observation, policy: Policy, window: Window) -> Decision:
    """The one scaling decision for `md`, given what the metrics said and the recent history."""
    current = md.replicas
    target = md.target_tokens_per_second

    def hold(reason: Reason, message: str, rec: int | None = None) -> Decision:
        return Decision(current, current, seen.rate, target, reason, message, rec)

    if seen.status is not MetricsStatus.OK or seen.rate is None:
        detail = f": {seen.detail}" if seen.detail else ""
        return hold(
            METRICS_REASON.get(seen.status, Reason.METRICS_MISSING),
            f"keeping {_replicas(current)}: metrics {seen.status}{detail}",
        )
    rate = seen.rate
    if md.canary:
        return hold(Reason.CANARY, f"keeping {_replicas(current)} while canary {md.canary} runs")

    rec = recommend(rate, target, md.min_replicas, md.max_replicas)
    what = f"{rate:.1f} tok/s against a target of {target:g} tok/s per replica"
    if rec > current:
        to = min(rec, current + max(1, policy.max_step))
        capped = f" (capped at +{policy.max_step} per step; {rec} wanted)" if to < rec else ""
        return Decision(
            current, to, rate, target, Reason.SCALE_UP, f"{what} needs {rec}{capped}", rec
        )
    if rec == current:
        return hold(Reason.STEADY, f"{what} needs {rec}", rec)

    # rec < current: scale down only to the highest recommendation within the window.
    candidates = [*window.recommendations, rec]
    if not window.complete:
        candidates.append(current)
    stabilized = max(candidates)
    if current > md.max_replicas:  # above the bound: come down now, whatever the history
        stabilized = min(stabilized, md.max_replicas)
    if stabilized >= current:
        return hold(
            Reason.STABILIZING,
            f"{what} needs {rec}; waiting for it to stay low for "
            f"{policy.stabilization_seconds:g}s before scaling down",
            rec,
        )
    return Decision(
        current,
        stabilized,
        rate,
        target,
        Reason.SCALE_DOWN,
        f"{what} needs {rec}; the highest need in the last "
        f"{policy.stabilization_seconds:g}s was {stabilized}",
        rec,
    )


@dataclass
class _Track:
    since: float  # when the continuous run of recommendations began
    entries: deque[tuple[float, int]] = field(default_factory=deque)


class RecommendationHistory:
    """Per-deployment recommendations with their times, kept for one stabilization window."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._tracks: dict[tuple[str, str], _Track] = {}

    def window(self, key: tuple[str, str], now: float) -> Window:
        track = self._tracks.get(key)
        if track is None:
            return Window()
        cutoff = now - self.window_seconds
        while track.entries and track.entries[0][0] < cutoff:
            track.entries.popleft()
        return Window(tuple(r for _, r in track.entries), complete=track.since <= cutoff)

    def record(self, key: tuple[str, str], now: float, recommendation: int) -> None:
        track = self._tracks.setdefault(key, _Track(since=now))
        track.entries.append((now, recommendation))

    def reset(self, key: tuple[str, str]) -> None:
        """Forget a deployment's history: the evidence that the rate stayed low is broken."""
        self._tracks.pop(key, None)

    def forget_all_but(self, keys: Sequence[tuple[str, str]]) -> None:
        for key in set(self._tracks) - set(keys):
            del self._tracks[key]

    def apply(self, key: tuple[str, str], now: float, decision: Decision) -> None:
        """Update the history after a decision: record a usable recommendation, else reset
        (metrics unusable or a canary running: both leave decide() without a recommendation)."""
        if decision.recommendation is None:
            self.reset(key)
        else:
            self.record(key, now, decision.recommendation)
