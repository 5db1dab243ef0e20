"""What one plnt function writes and another reads, in one place.

The canary gate writes `status.canary.gate` and the pipeline context key VERDICT_CONTEXT; the
ModelDeployment's schedule step reads the verdict back, writes `status.revisions`,
`status.canary` and the Canary condition; the ModelService reads the revisions and the
canary's trafficPercent, the WorkflowRun all of it. Each name, value and shape here is the
contract between them (docs/canary-gate.md, docs/workflow-run.md), so a change to it is one
edit. Readers get typed views of what may be malformed (an observed status is user-writable):
a field of the wrong type reads as absent, never raises.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

MODELPLANE_GROUP = "modelplane.ai"
MODELPLANE_VERSION = "v1alpha1"
MODELPLANE_API_VERSION = f"{MODELPLANE_GROUP}/{MODELPLANE_VERSION}"

# The gate's last verdict, for the later steps of the same pipeline run.
VERDICT_CONTEXT = "plnt.work/canary-verdict"

# status.canary.gate.verdict
PASS = "Pass"  # noqa: S105 (a verdict, not a password)
FAIL = "Fail"
VERDICTS = (PASS, FAIL)
# status.canary.gate.state
WAITING = "Waiting"  # the revision under test is not ready to be measured
MEASURING = "Measuring"
MEASURED = "Measured"  # a verdict is in
# status.canary.mode: how the run's revision is (or was, beside its verdict) tested
FIRST_ROLLOUT = "FirstRollout"  # no stable revision: it takes no traffic until it passes
BESIDE_STABLE = "Canary"  # a new revision beside the stable one, at trafficPercent
IN_PLACE = "InPlace"  # the stable revision re-tested, its pods and traffic unchanged
MODES = (FIRST_ROLLOUT, BESIDE_STABLE, IN_PLACE)
# The reasons of the Canary and CanaryGate conditions, which the WorkflowRun reads too, are in
# plnt/conditions.py with every other shared condition.


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def status_of(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return _mapping((obj or {}).get("status"))


@dataclasses.dataclass(frozen=True)
class Gate:
    """`status.canary.gate` as read back. `raw` is the dict as written, carried verbatim."""

    raw: Mapping[str, Any]
    revision: str | None = None
    run: str | None = None
    state: str | None = None
    verdict: str | None = None
    reason: str | None = None
    message: str | None = None

    @classmethod
    def of(cls, value: object) -> Gate:
        raw = _mapping(value)
        return cls(
            raw=raw,
            revision=_text(raw.get("revision")),
            run=_text(raw.get("run")),
            state=_text(raw.get("state")),
            verdict=_text(raw.get("verdict")),
            reason=_text(raw.get("reason")),
            message=_text(raw.get("message")),
        )

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    @property
    def decided(self) -> bool:
        return self.verdict in VERDICTS


@dataclasses.dataclass(frozen=True)
class Revisions:
    """`status.revisions`: the revision that serves traffic and the one under test."""

    stable: str | None = None
    canary: str | None = None

    @classmethod
    def of(cls, obj: Mapping[str, Any] | None) -> Revisions:
        value = status_of(obj).get("revisions")
        if not isinstance(value, Mapping):
            return cls()
        return cls(_text(value.get("stable")) or None, _text(value.get("canary")) or None)


@dataclasses.dataclass(frozen=True)
class CanaryStatus:
    """`status.canary` of a ModelDeployment."""

    run: str | None
    gate: Gate
    mode: str | None = None  # one of MODES
    readiness: str | None = None  # ReplicasReady's reason, for the revision under test

    @classmethod
    def of(cls, obj: Mapping[str, Any] | None) -> CanaryStatus:
        canary = _mapping(status_of(obj).get("canary"))
        mode = _text(canary.get("mode"))
        return cls(
            run=_text(canary.get("run")),
            gate=Gate.of(canary.get("gate")),
            mode=mode if mode in MODES else None,
            readiness=_text(canary.get("readiness")),
        )


def gate_at(status: Mapping[str, Any]) -> object:
    """`canary.gate` of a status exactly as it is there (anything, or None)."""
    return _mapping(status.get("canary")).get("gate")


def gate_in(obj: Mapping[str, Any] | None) -> object:
    """`status.canary.gate` of an XR exactly as it is there (anything, or None)."""
    return gate_at(status_of(obj))


def verdict_on(revision: str, run: str | None, *candidates: object) -> dict[str, Any] | None:
    """The first candidate that is a verdict on `revision` in `run` (a verdict without a run
    belongs to no run), as a dict; None when none is."""
    for candidate in candidates:
        gate = Gate.of(candidate)
        if gate.decided and gate.revision == revision and gate.run == run:
            return dict(gate.raw)
    return None


def figures(verdict: Mapping[str, Any]) -> str:
    """A verdict's measured p50/p95 figures against its budgets, e.g. `TTFT p50 98 ms, p95
    131 ms (budget 250 ms); TPOT p50 18 ms, p95 20 ms (budget 40 ms)`."""
    parts = []
    budgets = _mapping(verdict.get("budgets"))
    for metric in ("ttftMs", "tpotMs"):
        measured = _mapping(verdict.get(metric))
        if measured:
            text = (
                f"{metric[:4].upper()} p50 {measured.get('p50')} ms, p95 {measured.get('p95')} ms"
            )
            budget = budgets.get(metric, budgets.get(metric.replace("Ms", "BudgetMs")))
            if budget is not None:
                text += f" (budget {budget} ms)"
            parts.append(text)
    return "; ".join(parts)
