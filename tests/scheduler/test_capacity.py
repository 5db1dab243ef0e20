"""plnt.capacity over random pods: packing never puts a node over what it offers, a failed pack
leaves the pool as it was, release undoes pack, and recorded slots charge exactly."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from plnt import capacity

GPU, CPU = "device:gpu", "cpu"
SHAPE = capacity.Shape(((CPU, 16_000), (GPU, 8)))

pods = st.builds(
    lambda n, g, c, whole: capacity.Pods(n, capacity.vector({GPU: g, CPU: c}), whole),
    st.integers(1, 4),
    st.integers(0, 9),
    st.sampled_from([0, 2000, 6000, 17_000]),
    st.booleans(),
)


def state(pool: capacity.Pool) -> tuple:
    return ([dict(f) for f in pool.free], list(pool.pods), list(pool.whole))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 4), st.lists(st.lists(pods, min_size=1, max_size=3), max_size=6))
def test_packing_holds(nodes: int, replicas: list[list[capacity.Pods]]) -> None:
    pool = capacity.Pool(nodes, SHAPE)
    taken: list[list[capacity.Slot]] = []
    for groups in replicas:
        before = state(pool)
        slots = pool.pack(groups)
        if slots is None:
            assert state(pool) == before  # all or nothing
            continue
        assert len(slots) == sum(g.count for g in groups)
        taken.append(slots)
    # independently: per node, what its slots ask never exceeds what it offers
    for node in range(nodes):
        on = [s for ss in taken for s in ss if s.node == node]
        if any(s.whole for s in on):
            assert len(on) == 1
        for key, offered in SHAPE.offers:
            assert sum(dict(s.demand).get(key, 0) for s in on) <= offered
    # the same slots recorded and taken by a fresh pool fit exactly, and release undoes them
    fresh = capacity.Pool(nodes, SHAPE)
    assert all(fresh.take(ss) == [] for ss in taken)
    assert state(fresh) == state(pool)
    for ss in taken:
        fresh.release(ss)
    assert state(fresh) == state(capacity.Pool(nodes, SHAPE))
