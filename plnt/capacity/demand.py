"""What one pod of a member asks of one node of its pool, and so what a ModelReplica asks of its
cluster: the one reckoning the scheduler (functions/model_deployment, when it proposes) and the
binder (plnt_reconciler, when it commits) share.

A pod asks for the devices its requests matched (by device key, `capacity.device_key`), its
containers' CPU and memory (requests, else limits, as Kubernetes defaults requests to limits)
where the pool's class declares them per node, and a whole node when it belongs to a gang.

The binder reads nothing but the replica's spec and the pool's class (`replica_demand`): what a
replica's author writes in its annotations never sizes a commit. From the spec alone a DRA
request is matched to the class's device of its `deviceClassName` that covers its count with the
fewest devices to spare (then by name), as the scheduler's tie-break does; its CEL selectors are
the DRA allocator's to enforce on the cluster. A Synthetic device is never in a replica's spec
(the pool choice is the claim), so a member without DRA requests on a pool with Synthetic
devices holds all of them on its node, which is what the scheduler charges for a Synthetic
match too. On a pool whose class is unknown (not found, or offering nothing) a pod with device
requests takes a whole node, the most any pod can take.

Invariant: a commit is sized from the replica's spec and its pools' classes alone, so the
scheduler's proposal and the binder's commit count the same pods, and nothing in annotations
changes either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from plnt import capacity
from plnt.capacity import offer

GANG_ROLES = ("Leader", "Worker")


def pod_resources(resources: Iterable[Mapping[str, Any] | None]) -> tuple[int, int]:
    """CPU (millicores) and memory (bytes) one pod asks for: the sum over its containers'
    `resources` of requests, else limits."""
    cpu = memory = 0
    for r in resources:
        requests = (r or {}).get("requests") or {}
        limits = (r or {}).get("limits") or {}
        for key in (capacity.CPU, capacity.MEMORY):
            raw = requests.get(key, limits.get(key))
            if raw is None:
                continue
            amount = offer.amount(raw, milli=key == capacity.CPU)
            if key == capacity.CPU:
                cpu += amount
            else:
                memory += amount
    return cpu, memory


def pod_vector(
    devices: Mapping[str, int], cpu: int, memory: int, shape: capacity.Shape
) -> capacity.Vector:
    """A pod's demand on one node: its devices, and CPU and memory only where the node's class
    declares them."""
    demand = dict(devices)
    for resource, amount in ((capacity.CPU, cpu), (capacity.MEMORY, memory)):
        if shape.amount(resource) and amount:
            demand[resource] = amount
    return capacity.vector(demand)


def synthetic_charge(shape: capacity.Shape, key: str) -> int:
    """A Synthetic device is held whole by a pod on its node: nothing allocates a part of it."""
    return shape.amount(key)


def dra_device(shape: capacity.Shape, device_class_name: str, count: int) -> str:
    """The key of the node's DRA device kind of `device_class_name` that covers `count` with
    the fewest to spare (then by name); a key no node offers when none does, so that the pod
    never fits."""
    fits = [
        (n - count, key) for cls, key, n in shape.dra if cls == device_class_name and n >= count
    ]
    if fits:
        return min(fits)[1]
    return capacity.device_key(f"{device_class_name} (none with {count} per node)")


def replica_demand(
    spec: Mapping[str, Any], shapes: Mapping[str, capacity.Shape]
) -> dict[str, tuple[capacity.Pods, ...]]:
    """Per pool, the pods a ModelReplica spec runs and what each asks of one node, from the
    spec and the pools' shapes (`shapes`, by pool name; a pool not there offers nothing)."""
    out: dict[str, tuple[capacity.Pods, ...]] = {}
    for engine in spec.get("engines") or []:
        copies = int(engine.get("copies") or 1)
        for member in engine.get("members") or []:
            pool = str(member.get("nodePoolName") or "")
            pods = member_pods(member, shapes.get(pool) or capacity.Shape(()), copies)
            if pods is not None:
                out[pool] = (*out.get(pool, ()), pods)
    return out


def member_pods(
    member: Mapping[str, Any], shape: capacity.Shape, copies: int
) -> capacity.Pods | None:
    """The pods of one member on a pool of `shape` and what each asks of one node; None when
    it asks for no device (it costs nothing, as the scheduler counts it). On a pool whose class
    is unknown, what a pod asks is too: a whole node each."""
    role = member.get("role") or "Standalone"
    pods = int((member.get("worker") or {}).get("nodes") or 1) if role == "Worker" else 1
    if not shape.offers:
        return capacity.Pods(pods * copies, (), True) if member.get("deviceRequests") else None
    devices = _member_devices(member, shape)
    if not devices:
        return None
    containers = ((member.get("template") or {}).get("spec") or {}).get("containers")
    cpu, memory = pod_resources(c.get("resources") for c in containers or [])
    vector = pod_vector(devices, cpu, memory, shape)
    return capacity.Pods(pods * copies, vector, role in GANG_ROLES)


def _member_devices(member: Mapping[str, Any], shape: capacity.Shape) -> dict[str, int]:
    """What one pod of the member asks of a node's devices: its DRA requests, else the
    class's Synthetic devices (nothing allocates those: the pool choice is the claim)."""
    devices: dict[str, int] = {}
    for request in member.get("deviceRequests") or []:
        count = int(request.get("count") or 1)
        key = dra_device(shape, str(request.get("deviceClassName") or ""), count)
        devices[key] = devices.get(key, 0) + count
    return devices or {key: synthetic_charge(shape, key) for key in shape.synthetic}
