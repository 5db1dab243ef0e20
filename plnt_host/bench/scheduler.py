"""Benchmark: one ModelDeployment RunFunction over generated fleets, with the share spent in CEL.

Sizes are (clusters, pools per cluster, replicas). Each cluster's pools cycle through three GPU
classes (H100 x8, L40S x8, L4 x1). The deployment asks for `replicas` replicas of one member
claiming 8 GPUs with two selectors (memory >= 40Gi by `quantity`, compute capability >= 9.0.0
by `semver`), so only H100 pools fit. The fleet also holds as many replicas of another team's
deployment (other namespace), which the scheduler must count. The request is built once,
complete with required resources, as the gRPC server hands it to `run_function`; the timing
covers reading it, scheduling, composing and writing the response.

    python -m plnt_host.bench.scheduler          # prints one JSON object

Accounting: per size, what the placed replicas take in devices (the scheduler's unit), the
nodes they touch, and how many more 1-GPU replicas the fleet left free would hold (GPUs free on
packable nodes).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from plnt import capacity, contracts
from plnt.capacity.offer import class_shape, cluster_of

SIZES = ((10, 4, 1), (100, 8, 100), (1000, 8, 100))
TARGET_S = 0.5  # the budget for one RunFunction at (1000, 8, 100)
NODES_PER_POOL = 4
SELECTORS = (
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    'device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("9.0.0")) >= 0',
)
GPUS = {
    # class name: (GPUs per node, product, compute capability, memory)
    "bench-h100-8x": (8, "NVIDIA H100 80GB HBM3", "9.0.0", "81559Mi"),
    "bench-l40s-8x": (8, "NVIDIA L40S", "8.9.0", "46068Mi"),
    "bench-l4-1x": (1, "NVIDIA L4", "8.9.0", "23034Mi"),
}


def inference_class(name: str) -> dict[str, Any]:
    count, product, cc, memory = GPUS[name]
    return {
        "apiVersion": contracts.MODELPLANE_API_VERSION,
        "kind": "InferenceClass",
        "metadata": {"name": name},
        "spec": {
            "devices": [
                {
                    "name": "gpu",
                    "claim": "DRA",
                    "driver": "gpu.nvidia.com",
                    "deviceClassName": "gpu.nvidia.com",
                    "count": count,
                    "attributes": {
                        "productName": {"string": product},
                        "architecture": {"string": "Hopper" if cc == "9.0.0" else "Ada Lovelace"},
                        "cudaComputeCapability": {"version": cc},
                        "driverVersion": {"version": "570.148.8"},
                    },
                    "capacity": {"memory": {"value": memory}},
                }
            ]
        },
    }


def inference_cluster(index: int, pools: int) -> dict[str, Any]:
    classes = sorted(GPUS)
    pool_list = [
        {"name": f"pool-{j}", "className": classes[(index + j) % len(classes)]}
        for j in range(pools)
    ]
    return {
        "apiVersion": contracts.MODELPLANE_API_VERSION,
        "kind": "InferenceCluster",
        "metadata": {"name": f"cluster-{index:04d}", "labels": {"modelplane.ai/fleet": "bench"}},
        "spec": {"nodePools": [p | {"nodeCount": NODES_PER_POOL} for p in pool_list]},
        "status": {
            "gateway": {"address": f"10.{index // 250}.{index % 250}.1"},
            "pools": [p | {"nodeCapacity": NODES_PER_POOL} for p in pool_list],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
        },
    }


def other_replica(index: int, cluster: dict[str, Any]) -> dict[str, Any]:
    pool = cluster["status"]["pools"][0]["name"]
    return {
        "apiVersion": contracts.MODELPLANE_API_VERSION,
        "kind": "ModelReplica",
        "metadata": {
            "name": f"other-{index}",
            "namespace": "other-team",
            "labels": {"modelplane.ai/deployment": "other", "modelplane.ai/revision": "0000000000"},
        },
        "spec": {
            "clusterName": cluster["metadata"]["name"],
            "engines": [
                {
                    "name": "other",
                    "members": [
                        {
                            "role": "Standalone",
                            "nodePoolName": pool,
                            "deviceRequests": [
                                {"name": "gpu", "count": 1, "deviceClassName": "gpu.nvidia.com"}
                            ],
                            "template": {
                                "spec": {"containers": [{"name": "engine", "image": "x"}]}
                            },
                        }
                    ],
                }
            ],
        },
    }


def deployment(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": contracts.MODELPLANE_API_VERSION,
        "kind": "ModelDeployment",
        "metadata": {"name": "bench", "namespace": "bench"},
        "spec": {
            "replicas": replicas,
            "clusterSelector": {"matchLabels": {"modelplane.ai/fleet": "bench"}},
            "engines": [
                {
                    "name": "llm",
                    "members": [
                        {
                            "role": "Standalone",
                            "nodeSelector": {
                                "devices": [
                                    {
                                        "name": "gpu",
                                        "count": 8,
                                        "selectors": [{"cel": s} for s in SELECTORS],
                                    }
                                ]
                            },
                            "template": {
                                "spec": {
                                    "containers": [
                                        {
                                            "name": "engine",
                                            "image": "vllm/vllm-openai:v0.23.0",
                                            "args": ["--model=Qwen/Qwen3-235B-A22B-FP8"],
                                        }
                                    ]
                                }
                            },
                        }
                    ],
                }
            ],
        },
    }


def struct(obj: Mapping[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(obj)
    return s


def request(clusters: int, pools: int, replicas: int) -> fnv1.RunFunctionRequest:
    """A complete RunFunctionRequest: the XR, and the fleet already answered as requirements."""
    fleet = [inference_cluster(i, pools) for i in range(clusters)]
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.CopyFrom(struct(deployment(replicas)))
    answers = {
        # no fleet view: the function reads the whole fleet (the design the view replaces)
        "fleet-view-index": [],
        "fleet-view": [],
        "inference-clusters": fleet,
        "inference-classes": [inference_class(n) for n in sorted(GPUS)],
        "model-replicas": [other_replica(i, fleet[i % clusters]) for i in range(replicas)],
        "namespace": [],  # no fence or quota applies (plnt.capacity.tenant)
        "quota-ledgers": [],
    }
    for name, objs in answers.items():
        req.required_resources[name].items.extend(fnv1.Resource(resource=struct(o)) for o in objs)
    return req


P = ParamSpec("P")
R = TypeVar("R")


class _Timed(Generic[P, R]):
    """Wraps a CEL entry point, adding up the time spent inside it."""

    def __init__(self, fn: Callable[P, R]):
        self.fn = fn
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        start = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1


def run_once(req: fnv1.RunFunctionRequest) -> dict[str, Any]:
    from functions.model_deployment import fn
    from plnt import cel

    evaluate, compile_ = _Timed(cel.evaluate), _Timed(cel.compile)
    saved = cel.evaluate, cel.compile
    cel.evaluate, cel.compile = evaluate, compile_
    try:
        start, start_cpu = time.perf_counter(), time.process_time()
        rsp = fn.run_function(req)
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    finally:
        cel.evaluate, cel.compile = saved
    cel_s = evaluate.seconds + compile_.seconds
    placed = sum(1 for n in rsp.desired.resources if n.startswith("replica-"))
    return {
        "rsp": rsp,
        "wall_s": wall,
        "cpu_s": cpu,
        "cel_s": cel_s,
        "cel_evaluations": evaluate.calls,
        "placed": placed,
        "request_mb": req.ByteSize() / 1e6,
    }


def bench(sizes: tuple[tuple[int, int, int], ...] = SIZES, runs: int = 5) -> dict[str, Any]:
    """Per size: the first (cold CEL cache) and the median of `runs` RunFunction calls, as wall
    time and as this process's CPU time (which other load on the machine inflates less)."""
    from plnt import cel

    out: dict[str, Any] = {"target_s_at_1000x8x100": TARGET_S}
    for clusters, pools, replicas in sizes:
        req = request(clusters, pools, replicas)
        cache_clear = getattr(cel.compile, "cache_clear", None)
        if cache_clear is not None:
            cache_clear()
        cold = run_once(req)
        warm = [run_once(req) for _ in range(runs)]
        wall = statistics.median(r["wall_s"] for r in warm)
        cel_s = statistics.median(r["cel_s"] for r in warm)
        out[f"{clusters}x{pools}x{replicas}"] = {
            "request_mb": round(cold["request_mb"], 2),
            "placed": cold["placed"],
            "cold_s": round(cold["wall_s"], 4),
            "cold_cel_share": round(cold["cel_s"] / cold["wall_s"], 4),
            "median_s": round(wall, 4),
            "median_cpu_s": round(statistics.median(r["cpu_s"] for r in warm), 4),
            "cel_share": round(cel_s / wall, 4) if wall else 0.0,
            "cel_evaluations": cold["cel_evaluations"],
            "accounting": accounting(req, cold["rsp"]),
        }
    return out


def accounting(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    """The placement in devices, the nodes it touches, and the headroom left for 1-GPU
    replicas."""
    from plnt import xp

    placed = [
        xp.to_dict(r.resource)
        for n, r in sorted(rsp.desired.resources.items())
        if n.startswith("replica-")
    ]
    others = [xp.to_dict(i.resource) for i in req.required_resources["model-replicas"].items]
    pools = _fleet_pools(req)
    fleet = {
        "gpus": sum(p.nodes * p.shape.devices() for p in pools.values()),
        "nodes": sum(p.nodes for p in pools.values()),
    }
    _charge(pools, others + placed)
    return {
        "fleet": fleet,
        "placed_gpus": _gpus_asked(placed),
        "gpus_taken": sum(p.used_devices() for p in pools.values()),
        "nodes_touched": sum(p.nodes - p.free_nodes() for p in pools.values()),
        "one_gpu_replicas_that_still_fit": _one_gpu_room(pools),
    }


def _fleet_pools(req: fnv1.RunFunctionRequest) -> dict[tuple[str, str], capacity.Pool]:
    """Every pool of the request's clusters, empty, by (cluster, pool)."""
    from plnt import xp

    classes = {
        c["metadata"]["name"]: c
        for c in (xp.to_dict(i.resource) for i in req.required_resources["inference-classes"].items)
    }
    pools: dict[tuple[str, str], capacity.Pool] = {}
    for item in req.required_resources["inference-clusters"].items:
        c = cluster_of(xp.to_dict(item.resource))
        for p in c.pools:
            pools[(c.name, p.name)] = capacity.Pool(
                p.capacity, class_shape(classes.get(p.class_name))
            )
    return pools


def _charge(pools: Mapping[tuple[str, str], capacity.Pool], replicas: list[dict[str, Any]]) -> None:
    """Packs what each replica asks into its cluster's pools, as far as it fits."""
    from plnt.capacity import binding

    for obj in replicas:
        for pool, pods in binding.demand_of(obj).items():
            account = pools.get((obj["spec"]["clusterName"], pool))
            if account is not None:
                account.pack_what_fits(pods)


def _gpus_asked(replicas: list[dict[str, Any]]) -> int:
    """The GPUs the replicas ask for, pod by pod."""
    from plnt.capacity import binding

    return sum(
        p.count * dict(p.demand).get("device:gpu", 0)
        for obj in replicas
        for pods in binding.demand_of(obj).values()
        for p in pods
    )


def _one_gpu_room(pools: Mapping[tuple[str, str], capacity.Pool]) -> int:
    """How many more 1-GPU replicas the pools would hold, packed onto their free GPUs."""
    one_gpu = capacity.Pods(1, ((capacity.device_key("gpu"), 1),))
    room = 0
    for account in pools.values():
        free = account.free_total(capacity.device_key("gpu"))
        room += free - account.pack_what_fits([dataclasses.replace(one_gpu, count=free)])
    return room


if __name__ == "__main__":
    print(json.dumps(bench(), indent=2))
