"""Builders for scheduler tests: fleets, classes, engines and a stub CEL evaluator.

The stub understands two tiny expression forms, so placement rules are tested apart from CEL:
``mem>=N`` (device capacity memory in Gi) and ``cc>=X.Y`` (compute capability); ``error`` fails
at evaluation, ``syntax(`` fails to compile.
"""

from __future__ import annotations

from typing import Any

from plnt import capacity
from plnt.capacity import scheduling
from plnt.capacity.offer import cluster_of
from plnt.models.model_deployment import Engine


class StubCel:
    def __init__(self) -> None:
        self.evaluations: list[tuple[str, str]] = []

    def evaluate(self, expr: str, device: dict) -> bool:
        self.evaluations.append((expr, device["attributes"]["product"]["string"]))
        if expr == "error":
            raise ValueError("no such attribute")
        key, value = expr.split(">=")
        if key == "mem":
            return device["capacity"]["memory"]["value"] >= int(value)
        if key == "cc":
            return float(device["attributes"]["cc"]["string"]) >= float(value)
        raise AssertionError(expr)

    @staticmethod
    def compile(expr: str) -> None:
        if "(" in expr:
            raise ValueError("Syntax error: mismatched input")


GPUS = {
    # class: (count, memory Gi, compute capability)
    "h100": (8, 80, "9.0"),
    "l40s": (8, 48, "8.9"),
    "l4": (1, 24, "8.9"),
}


def klass(name: str, claim: str = "DRA") -> dict[str, Any]:
    count, mem, cc = GPUS.get(name, (1, 0, "0.0"))
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceClass",
        "metadata": {"name": name},
        "spec": {
            "devices": [
                {
                    "name": "gpu",
                    "claim": claim,
                    "driver": "gpu.nvidia.com",
                    "deviceClassName": "gpu.nvidia.com",
                    "count": count,
                    "attributes": {"product": {"string": name}, "cc": {"string": cc}},
                    "capacity": {"memory": {"value": mem}},
                }
            ]
        },
    }


CLASSES = [klass(n) for n in GPUS]


def cluster(
    name: str,
    pools: list[tuple[str, str, int]],
    *,
    ready: bool = True,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {
            "gateway": {"address": f"{name}.example"} if ready else {},
            "pools": [{"name": p, "className": c, "nodeCapacity": n} for p, c, n in pools],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def member(
    role: str = "Standalone",
    count: int = 1,
    selectors: tuple[str, ...] = (),
    nodes: int | None = None,
    selective: bool = True,
) -> dict[str, Any]:
    container = {"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}
    out: dict[str, Any] = {"role": role, "template": {"spec": {"containers": [container]}}}
    if nodes is not None:
        out["worker"] = {"nodes": nodes}
    if selective:
        out["nodeSelector"] = {
            "devices": [
                {"name": "gpu", "count": count, "selectors": [{"cel": s} for s in selectors]}
            ]
        }
    return out


def view(engines: list[dict[str, Any]]) -> tuple[scheduling.Engine, ...]:
    """The scheduler's view of spec.engines, parsed by the model the function parses with."""
    return scheduling.engines_from([Engine.model_validate(e) for e in engines])


def engine(name: str = "llm", *members: dict[str, Any], copies: int = 1) -> dict[str, Any]:
    return {"name": name, "copies": copies, "members": list(members) or [member()]}


def placed(
    name: str, cluster_name: str, nodes: dict[str, int], deployment: str = "other"
) -> scheduling.PlacedReplica:
    """A replica taking a whole node per pod: `nodes` pods on each pool."""
    return scheduling.PlacedReplica(
        namespace="ns",
        name=name,
        deployment=deployment,
        revision="r1",
        cluster=cluster_name,
        demand=capacity.whole_nodes(nodes),
        engine_pools=tuple(("llm", p) for p in nodes),
    )


def run(
    engines: list[dict[str, Any]],
    clusters: list[dict[str, Any]],
    replicas: int,
    *,
    fleet: list[scheduling.PlacedReplica] = (),
    own: list[scheduling.PlacedReplica] = (),
    selector=lambda labels: True,
    classes: list[dict[str, Any]] = CLASSES,
    cel: StubCel | None = None,
) -> scheduling.Schedule:
    cel = cel or StubCel()
    return scheduling.schedule(
        scheduling.Ask(view(engines), replicas, selector),
        scheduling.FleetState([cluster_of(c) for c in clusters], classes, list(fleet)),
        scheduling.Owner(own=list(own)),
        scheduling.Cel(cel.evaluate, cel.compile),
    )


def where(result: scheduling.Schedule) -> list[tuple[str, tuple[str, ...]]]:
    """New placements as (cluster, engine pools)."""
    return [(p.cluster, tuple(e.pool for e in p.engines)) for p in result.placed]
