"""Helpers several test packages share and the shipped package has no use for."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from plnt import xp
from plnt.gate.fake_server import Behaviour, FakeServer
from plnt_host import render, runtime


def request(xr: dict[str, Any], observed: Iterable[dict[str, Any]] = ()) -> fnv1.RunFunctionRequest:
    """A request observing `xr` and the composed resources in `observed`, each keyed by its
    composition-resource-name annotation as Crossplane keys them."""
    req = fnv1.RunFunctionRequest(
        observed=fnv1.State(composite=fnv1.Resource(resource=_struct(xr)))
    )
    for obj in observed:
        key = (obj.get("metadata", {}).get("annotations") or {}).get(xp.COMPOSITION_RESOURCE_NAME)
        if key:
            req.observed.resources[key].resource.CopyFrom(_struct(obj))
    return req


def call_function(
    run: runtime.RunFunction,
    xr: dict[str, Any],
    required: Iterable[dict[str, Any]] = (),
    observed: Iterable[dict[str, Any]] = (),
    name: str = "function",
) -> fnv1.RunFunctionResponse:
    """One function on one XR, its requirements answered from ``required`` until stable, as
    `plnt render` answers a pipeline step's."""
    rsp, _ = render.run_with_requirements(run, request(xr, observed), list(required), name)
    return rsp


def _struct(obj: dict[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(obj)
    return s


def has_fatal(rsp: fnv1.RunFunctionResponse) -> bool:
    return any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results)


@contextlib.contextmanager
def serve_in_thread(behaviour: Behaviour, host: str = "127.0.0.1") -> Iterator[FakeServer]:
    """Run a FakeServer on its own event loop in a daemon thread (for synchronous callers)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-vllm", daemon=True)
    thread.start()
    server = FakeServer(behaviour, host=host)
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=10)
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def rss_kib(pid: int) -> int:
    """A process's resident set now (the benchmarks read the peak, VmHWM)."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise LookupError("VmRSS")


def binder_annotation(obj: dict[str, Any]) -> str:
    """The `plnt.work/binding` annotation a binder writes on `obj` once it committed it alone on
    its pools (whole nodes from node 0): for tests of what the ModelDeployment function reads
    of its replicas. It binds nothing: rendering checks the ledger
    (plnt.capacity.binding.verify)."""
    from plnt import capacity
    from plnt.capacity import binding

    state = binding.state_of(obj)
    slots = {}
    for pool, pods in state.demand.items():
        account = capacity.Pool(sum(p.count for p in pods), capacity.Shape(()))
        slots[pool] = tuple(account.pack(pods) or ())
    meta = obj.get("metadata") or {}
    return binding.binding_json(
        state.digest,
        (obj.get("spec") or {}).get("clusterName", ""),
        slots,
        replica=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        uid=meta.get("uid", ""),
    )


GPU_CLASS = "gpu.nvidia.com"  # the DRA device class of the tests' GPUs, device kind `gpu`


def gpu_shape(gpus: int, **offers: int) -> Any:
    """One node offering `gpus` GPUs through DRA (and `offers`, e.g. cpu): as
    plnt.capacity.offer reads an InferenceClass of them."""
    from plnt import capacity

    return capacity.Shape(
        capacity.vector({"device:gpu": gpus, **offers}), ((GPU_CLASS, "device:gpu", gpus),)
    )


def spec_asking(cluster: str, demand: Any) -> dict[str, Any]:
    """A ModelReplica spec that asks exactly `demand` (per pool, `capacity.Pods` of GPUs) of
    pools shaped by `gpu_shape`: one engine per Pods entry, `count` copies of a member asking
    its GPUs (a gang's Leader for a whole-node entry), as the binder reads it
    (plnt.capacity.demand)."""
    engines = []
    for pool, pods in sorted(demand.items()):
        for p in pods:
            gpus = dict(p.demand).get("device:gpu", 1)
            member: dict[str, Any] = {
                "role": "Leader" if p.whole else "Standalone",
                "nodePoolName": pool,
                "deviceRequests": [{"name": "gpu", "count": gpus, "deviceClassName": GPU_CLASS}],
                "template": {"spec": {"containers": [{"name": "engine", "image": "engine"}]}},
            }
            members = [member]
            if p.whole:
                members.append(
                    {"role": "Worker", "worker": {"nodes": 1}, "nodePoolName": pool,
                     "template": member["template"]}
                )  # fmt: skip
            engines.append({"name": f"e{len(engines)}", "copies": p.count, "members": members})
    return {"clusterName": cluster, "engines": engines}
