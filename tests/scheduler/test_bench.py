"""The scheduler benchmark runs and reports what it should (figures, not thresholds)."""

from __future__ import annotations

from plnt_host.bench import scheduler as bench_scheduler


def test_bench_reports_each_size() -> None:
    out = bench_scheduler.bench(sizes=((10, 4, 1), (12, 3, 5)), runs=1)
    assert set(out) == {"target_s_at_1000x8x100", "10x4x1", "12x3x5"}
    small = out["10x4x1"]
    assert small["placed"] == 1
    # two selectors on the two 8-GPU classes; the L4 class fails on count before any selector
    assert small["cel_evaluations"] == 4
    assert 0 <= small["cel_share"] <= 1
    assert out["12x3x5"]["placed"] == 5


def test_generated_fleet_mixes_three_gpu_classes() -> None:
    req = bench_scheduler.request(3, 4, 2)
    pools = {
        p.struct_value.fields["className"].string_value
        for item in req.required_resources["inference-clusters"].items
        for p in item.resource.fields["status"].struct_value.fields["pools"].list_value.values
    }
    assert pools == set(bench_scheduler.GPUS)
    assert len(req.required_resources["model-replicas"].items) == 2


def test_bench_reports_devices_beside_nodes() -> None:
    acc = bench_scheduler.bench(sizes=((10, 4, 1),), runs=1)["10x4x1"]["accounting"]
    # 10 clusters x 4 pools x 4 nodes, the classes cycling H100 x8, L40S x8, L4 x1
    assert acc["fleet"] == {"gpus": 916, "nodes": 160}
    assert acc["placed_gpus"] == 8  # one 8-GPU replica
    assert acc["nodes_touched"] == 2  # it and the other team's hand-made replica
    # counted in devices, the 1-GPU replicas that still fit are the free GPUs, not free nodes
    assert acc["one_gpu_replicas_that_still_fit"] == 916 - acc["gpus_taken"]
