"""The scaling rules as a table, then the stabilization window over a simulated clock."""

from __future__ import annotations

import pytest

from plnt_reconciler.decision import (
    Deployment,
    MetricsStatus,
    Observation,
    Policy,
    Reason,
    RecommendationHistory,
    Window,
    decide,
    recommend,
)

POLICY = Policy(max_step=4, stabilization_seconds=300)
FULL = True  # the history spans the whole stabilization window


def md(replicas: int, low: int = 1, high: int = 10, target: int = 50, canary: str = ""):
    return Deployment("team-a", "llama", replicas, low, high, target, canary)


def ok(rate: float) -> Observation:
    return Observation.ok(rate)


# (id, deployment, observation, window, policy, expected to, expected reason)
CASES = [
    ("steady", md(3), ok(150), Window(), POLICY, 3, Reason.STEADY),
    ("steady-just-under", md(3), ok(149.9), Window(), POLICY, 3, Reason.STEADY),
    ("fractional-target", md(8, target=12.5), ok(100), Window(), POLICY, 8, Reason.STEADY),
    ("spike-within-step", md(2), ok(200), Window(), POLICY, 4, Reason.SCALE_UP),
    ("spike-capped-by-max-step", md(2), ok(500), Window(), POLICY, 6, Reason.SCALE_UP),
    ("max-step-1", md(2), ok(500), Window(), Policy(1, 300), 3, Reason.SCALE_UP),
    ("spike-clamped-to-max", md(3, high=5), ok(5000), Window(), POLICY, 5, Reason.SCALE_UP),
    ("below-min-rises-to-min", md(0, low=2), ok(0), Window(), POLICY, 2, Reason.SCALE_UP),
    ("zero-rate-at-min", md(2, low=2), ok(0), Window(), POLICY, 2, Reason.STEADY),
    ("dip-no-history", md(4), ok(50), Window(), POLICY, 4, Reason.STABILIZING),
    ("dip-inside-window", md(4), ok(50), Window((4, 4, 1)), POLICY, 4, Reason.STABILIZING),
    ("dip-window-full-high", md(4), ok(50), Window((4, 1, 1), FULL), POLICY, 4, Reason.STABILIZING),
    ("dip-after-window", md(4), ok(50), Window((1, 1, 1), FULL), POLICY, 1, Reason.SCALE_DOWN),
    ("dip-to-window-max", md(4), ok(50), Window((3, 2, 1), FULL), POLICY, 3, Reason.SCALE_DOWN),
    ("dip-not-below-min", md(4, low=2), ok(10), Window((2, 2), FULL), POLICY, 2, Reason.SCALE_DOWN),
    ("above-max-comes-down-now", md(8, high=5), ok(900), Window(), POLICY, 5, Reason.SCALE_DOWN),
    (
        "stale-metrics",
        md(3),
        Observation(MetricsStatus.STALE, 900, "old"),
        Window(),
        POLICY,
        3,
        Reason.METRICS_STALE,
    ),
    (
        "missing-metrics",
        md(3),
        Observation(MetricsStatus.MISSING),
        Window(),
        POLICY,
        3,
        Reason.METRICS_MISSING,
    ),
    (
        "query-failed",
        md(3),
        Observation(MetricsStatus.FAILED, detail="HTTP 503"),
        Window(),
        POLICY,
        3,
        Reason.QUERY_FAILED,
    ),
    ("canary-blocks-scale-up", md(2, canary="r2"), ok(900), Window(), POLICY, 2, Reason.CANARY),
    (
        "canary-blocks-scale-down",
        md(6, canary="r2"),
        ok(0),
        Window((1,), FULL),
        POLICY,
        6,
        Reason.CANARY,
    ),
]


@pytest.mark.parametrize(
    ("md_", "seen", "window", "policy", "to", "reason"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decide_table(md_, seen, window, policy, to, reason):
    decision = decide(md_, seen, policy, window)
    assert (decision.to_replicas, decision.reason) == (to, reason)
    assert decision.from_replicas == md_.replicas
    assert decision.target == md_.target_tokens_per_second
    assert decision.changed == (to != md_.replicas)
    assert decision.warning == (
        reason in {Reason.METRICS_STALE, Reason.METRICS_MISSING, Reason.QUERY_FAILED}
    )


def test_held_decisions_explain_themselves():
    stale = decide(md(3), Observation(MetricsStatus.STALE, 9, "newest 300s old"), POLICY, Window())
    assert stale.message == "keeping 3 replicas: metrics stale: newest 300s old"
    canary = decide(md(2, canary="llama-r2"), ok(900), POLICY, Window())
    assert "canary llama-r2" in canary.message
    capped = decide(md(2), ok(500), POLICY, Window())
    assert "capped at +4 per step; 10 wanted" in capped.message


def test_annotation_carries_rate_target_from_to_why():
    decision = decide(md(2), ok(212.3456), POLICY, Window())
    assert decision.annotation() == {
        "rate": 212.346,
        "target": 50,
        "from": 2,
        "to": 5,
        "why": "ScaleUp",
        "message": decision.message,
    }


@pytest.mark.parametrize(
    ("rate", "target", "low", "high", "want"),
    [(0, 50, 1, 10, 1), (50, 50, 1, 10, 1), (50.01, 50, 1, 10, 2), (1e9, 50, 1, 10, 10)],
)
def test_recommend_is_ceil_clamped(rate, target, low, high, want):
    assert recommend(rate, target, low, high) == want


class Sim:
    """Drive decide() + RecommendationHistory the way the loop does, on a simulated clock."""

    def __init__(self, replicas: int, window: float = 300, interval: float = 30):
        self.replicas, self.now, self.interval = replicas, 0.0, interval
        self.history = RecommendationHistory(window)
        self.policy = Policy(max_step=4, stabilization_seconds=window)

    def step(self, seen: Observation) -> Reason:
        dep = md(self.replicas)
        decision = decide(dep, seen, self.policy, self.history.window(dep.key, self.now))
        self.history.apply(dep.key, self.now, decision)
        self.replicas = decision.to_replicas
        self.now += self.interval
        return decision.reason


def test_scale_down_waits_for_a_full_window_of_low_rate():
    sim = Sim(replicas=4)
    for _ in range(5):
        assert sim.step(ok(200)) is Reason.STEADY
    reasons = [sim.step(ok(50)) for _ in range(10)]  # 10 x 30 s: the window is 300 s
    assert set(reasons) == {Reason.STABILIZING}
    assert sim.replicas == 4
    assert sim.step(ok(50)) is Reason.SCALE_DOWN
    assert sim.replicas == 1


def test_short_dip_then_recovery_never_scales_down():
    sim = Sim(replicas=4)
    for _ in range(11):
        sim.step(ok(200))
    for _ in range(5):
        assert sim.step(ok(10)) is Reason.STABILIZING
    assert sim.step(ok(200)) is Reason.STEADY
    for _ in range(9):
        sim.step(ok(10))
    assert sim.replicas == 4  # the recovery at t=480 s is still inside the window


def test_missing_metrics_restart_the_window():
    sim = Sim(replicas=4)
    for _ in range(9):
        sim.step(ok(10))
    assert sim.step(Observation(MetricsStatus.MISSING)) is Reason.METRICS_MISSING
    reasons = [sim.step(ok(10)) for _ in range(10)]
    assert set(reasons) == {Reason.STABILIZING}  # a fresh 300 s of evidence is needed
    assert sim.step(ok(10)) is Reason.SCALE_DOWN


def test_scale_up_is_immediate_and_stepwise():
    sim = Sim(replicas=1)
    assert sim.step(ok(500)) is Reason.SCALE_UP
    assert sim.replicas == 5
    assert sim.step(ok(500)) is Reason.SCALE_UP
    assert sim.replicas == 9
    assert sim.step(ok(500)) is Reason.SCALE_UP
    assert sim.replicas == 10
