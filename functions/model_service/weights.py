"""Traffic shares of a ModelService, as integer weights that always sum to TOTAL.

Each ``spec.endpoints[]`` group gets ``weight / sum(weights)`` of the traffic (groups that
select no endpoint are left out, so their share is not lost). Inside a group every endpoint
counts once, and a deployment's endpoints together carry their count's part of the share;
when that deployment runs a canary, its canary endpoints split ``trafficPercent`` of that
part and its stable endpoints the rest. An endpoint chosen by two groups gets both parts.

Shares are exact fractions; the integers come from the largest-remainder method (floors
first, then one unit each to the largest remainders, ties by endpoint name), so they sum to
exactly TOTAL and are deterministic.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from fractions import Fraction

TOTAL = 1000


@dataclasses.dataclass(frozen=True)
class Endpoint:
    name: str
    deployment: str | None = None
    canary: bool = False


@dataclasses.dataclass(frozen=True)
class Group:
    weight: int
    endpoints: tuple[Endpoint, ...]


def shares(groups: Sequence[Group], canary_percent: Mapping[str, int]) -> dict[str, Fraction]:
    """Exact share of the traffic per endpoint name (sums to 1 when any group has weight)."""
    live = [g for g in groups if g.endpoints and g.weight > 0]
    total_weight = sum(g.weight for g in live)
    out: dict[str, Fraction] = defaultdict(Fraction)
    for group in groups:
        for ep in group.endpoints:
            out[ep.name] += 0
    for group in live:
        group_share = Fraction(group.weight, total_weight)
        by_deployment: dict[str | None, list[Endpoint]] = defaultdict(list)
        for ep in group.endpoints:
            by_deployment[ep.deployment if ep.deployment else None].append(ep)
        for deployment, members in by_deployment.items():
            part = group_share * len(members) / len(group.endpoints)
            percent = canary_percent.get(deployment or "", 0) if deployment is not None else 0
            for name, share in _split(members, part, percent).items():
                out[name] += share
    return dict(out)


def _split(members: Sequence[Endpoint], part: Fraction, percent: int) -> dict[str, Fraction]:
    """One deployment's part of a group over its endpoints: `percent` of it to the canary
    endpoints and the rest to the stable ones, each side evenly; evenly over all of them
    when there is no canary percent or only one side."""
    canaries = [e for e in members if e.canary]
    stables = [e for e in members if not e.canary]
    out: dict[str, Fraction] = defaultdict(Fraction)
    if not canaries or not stables or not percent:
        for ep in members:
            out[ep.name] += part / len(members)
        return out
    canary_part = part * Fraction(percent, 100)
    for ep in canaries:
        out[ep.name] += canary_part / len(canaries)
    for ep in stables:
        out[ep.name] += (part - canary_part) / len(stables)
    return out


def integer_weights(exact: Mapping[str, Fraction], total: int = TOTAL) -> dict[str, int]:
    """Largest-remainder apportionment of ``total`` by ``exact`` shares."""
    if not exact or sum(exact.values()) == 0:
        return dict.fromkeys(exact, 0)
    scaled = {name: share * total for name, share in exact.items()}
    floors = {name: int(value) for name, value in scaled.items()}
    left = total - sum(floors.values())
    order = sorted(scaled, key=lambda n: (-(scaled[n] - floors[n]), n))
    for name in order[:left]:
        floors[name] += 1
    return floors
