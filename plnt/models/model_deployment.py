"""Typed ModelDeployment spec, mirroring apis/modeldeployments/definition.yaml.

Engines, pod templates, serving and modelCacheRef are ModelReplica's shapes
(`plnt.models.model_replica`), with `nodeSelector.devices` on a member in place of the
scheduler-resolved `nodePoolName`/`deviceRequests`. The composed ModelReplicas get the XR's
own dicts verbatim (so nothing is lost to a model round trip); these models validate them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from plnt import xp
from plnt.models.base import SpecModel
from plnt.models.model_replica import EngineOf, MemberBase, ModelCacheRef, Serving, check_engines

_Model = SpecModel
DEFAULT_TRAFFIC_PERCENT = 5  # seed 000's lifecycle: "New canary at 5% traffic"


class Selector(_Model):
    cel: str = Field(min_length=1, max_length=10240)


class DeviceSelector(_Model):
    name: str = Field(min_length=1, max_length=63)
    count: int = Field(default=1, ge=1, le=64)
    selectors: list[Selector] = Field(default_factory=list, max_length=8)


class NodeSelector(_Model):
    devices: list[DeviceSelector] = Field(min_length=1, max_length=16)


class DeploymentMember(MemberBase):
    """A member as the user writes it: the devices its pods need instead of a pinned pool."""

    node_selector: NodeSelector | None = Field(default=None, alias="nodeSelector")


Engine = EngineOf[DeploymentMember]


class LabelSelectorRequirement(_Model):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class ClusterSelector(_Model):
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, alias="matchExpressions"
    )

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        return all(_requirement_holds(r, labels) for r in self.match_expressions)


def _requirement_holds(req: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    return {
        "In": present and labels.get(req.key) in req.values,
        "NotIn": not present or labels.get(req.key) not in req.values,
        "Exists": present,
        "DoesNotExist": not present,
    }[req.operator]


class SmokeTest(_Model):
    prompts: int = Field(default=10, ge=1, le=1000)
    ttft_budget_ms: float = Field(alias="ttftBudgetMs", gt=0)
    tpot_budget_ms: float = Field(alias="tpotBudgetMs", gt=0)
    max_tokens: int | None = Field(default=None, alias="maxTokens", ge=1)


class Canary(_Model):
    traffic_percent: int = Field(
        default=DEFAULT_TRAFFIC_PERCENT, alias="trafficPercent", ge=1, le=100
    )
    smoke_test: SmokeTest | None = Field(default=None, alias="smokeTest")
    # A smoke test is of a revision within a run: a new runId (a WorkflowRun's workflowRunId)
    # re-tests even an unchanged revision; without one, each revision is tested once.
    run_id: str | None = Field(default=None, alias="runId", min_length=1, max_length=63)

    def replicas(self, total: int) -> int:
        """Canary replicas beside `total` stable ones: ceil(total x percent / 100), at least 1."""
        return max(1, math.ceil(total * self.traffic_percent / 100))


class Autoscaling(_Model):
    target_tokens_per_second: float = Field(alias="targetTokensPerSecond", gt=0)
    min_replicas: int | None = Field(default=None, alias="minReplicas", ge=0, le=1000)
    # required, as by the XRD and the reconciler: an unbounded GPU scale-up is never a default
    max_replicas: int = Field(alias="maxReplicas", ge=0, le=1000)


# A grace period: one or more <number><unit> (ms, s, m, h), as `5m`, `90s`, `1h30m` or `0s`.
DURATION_PATTERN = r"^([0-9]+(ms|s|m|h))+$"
DEFAULT_FAILOVER_AFTER = "5m"
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """A duration matching DURATION_PATTERN in seconds."""
    return sum(int(n) * _UNITS[u] for n, u in re.findall(r"([0-9]+)(ms|s|m|h)", text))


class Failover(_Model):
    """How long a replica's cluster may stay degraded before a replacement is placed on a
    healthy one (docs/scheduler.md, "Failover"); `0s` turns failover off."""

    after: str = Field(default=DEFAULT_FAILOVER_AFTER, max_length=32, pattern=DURATION_PATTERN)

    @property
    def after_seconds(self) -> float:
        return duration_seconds(self.after)


class ModelDeploymentSpec(_Model):
    engines: list[Engine] = Field(min_length=1, max_length=8)
    serving: Serving = Field(default_factory=Serving)
    model_cache_ref: ModelCacheRef | None = Field(default=None, alias="modelCacheRef")
    replicas: int = Field(default=1, ge=0, le=1000)
    cluster_selector: ClusterSelector = Field(
        default_factory=ClusterSelector, alias="clusterSelector"
    )
    canary: Canary | None = None
    autoscaling: Autoscaling | None = None
    failover: Failover = Field(default_factory=Failover)


def check(spec: ModelDeploymentSpec) -> None:
    """The XRD's CEL rules, repeated: raises xp.InvalidInput naming the field."""
    check_engines(list(spec.engines), spec.serving)
    if not any(m.node_selector is not None for e in spec.engines for m in e.members):
        raise xp.InvalidInput(
            "spec.engines", "at least one member of the deployment needs a nodeSelector"
        )
    for i, engine in enumerate(spec.engines):
        for j, member in enumerate(engine.members):
            names = [d.name for d in (member.node_selector.devices if member.node_selector else [])]
            for k, name in enumerate(names):
                if names.index(name) != k:
                    raise xp.InvalidInput(
                        f"spec.engines[{i}].members[{j}].nodeSelector.devices[{k}].name",
                        f"device request names must be unique: {name}",
                    )
    if spec.autoscaling:
        check_autoscaling(spec.autoscaling)


def check_autoscaling(scaling: Autoscaling) -> None:
    """The XRD's CEL rule on autoscaling bounds; the reconciler checks with it too."""
    if scaling.min_replicas is not None and scaling.min_replicas > scaling.max_replicas:
        raise xp.InvalidInput("spec.autoscaling", "minReplicas must not exceed maxReplicas")
