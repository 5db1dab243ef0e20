"""Capacity that holds on a live Crossplane: many ModelDeployments applied in one
`kubectl apply`, competing for one pool, never commit more devices than the pool has.

The fleet's pool `h100` on lab-h100 has 4 nodes of 8 GPUs (32 devices). Six ModelDeployments of
two 4-GPU replicas ask for 48. Crossplane reconciles them concurrently; the binder
(`plnt reconcile --bind-only`, started by the stack) is the one writer that commits replicas to
the pool. Counted independently of plnt's ledger, from what was rendered: the GPUs of every
ModelReplica whose engine workload exists never exceed 32 in any sample, the pool ends full
(8 replicas, two GPU-sharing replicas per node), and a deployment left short says so in a
condition. The second round deletes everything, applies again and kills the model-deployment
function, Crossplane core and the binder mid-way.
"""

from __future__ import annotations

import copy
import time

import pytest
import yaml

from tests.e2e import fleet, live
from tests.e2e.stack import REPO

MD = ("modelplane.ai/v1alpha1", "ModelDeployment")
MR = ("modelplane.ai/v1alpha1", "ModelReplica")
NAMES = [f"race-{i}" for i in range(6)]
REPLICAS, GPUS = 2, 4
POOL_GPUS = fleet.NODES * 8


def _deployments(namespace: str) -> list[dict]:
    base = yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
    out = []
    for name in NAMES:
        md = copy.deepcopy(base)
        md["metadata"] = {"name": name, "namespace": namespace}
        md["spec"]["replicas"] = REPLICAS
        (device,) = md["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"]
        device["count"] = GPUS
        out.append(md)
    return out


def _race(plane, namespace: str, *, faults: bool) -> list[int]:
    """Applies the six deployments at once and samples the rendered GPUs until the pool is
    full and stays so; returns every sample's total."""
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        *_deployments(namespace),
    ]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    samples: list[int] = []
    if faults:
        live.wait_for(
            lambda: plane.mgmt.list(*MR, namespace=namespace), 120, "a first ModelReplica"
        )
        plane.restart("plnt-function-model-deployment")
        plane.restart("plnt-binder")
        plane.procs.stop("crossplane", kill=True)
        time.sleep(2)
        plane.start_crossplane()
    full_since = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        total = sum(fleet.rendered_gpus(plane, namespace).values())
        samples.append(total)
        assert total <= POOL_GPUS, f"{total} GPUs rendered on a pool of {POOL_GPUS}"
        if total == POOL_GPUS:
            full_since = full_since or time.monotonic()
            if time.monotonic() - full_since > 15:
                break
        else:
            full_since = None
        time.sleep(1)
    return samples


def _short_deployments_say_so(plane, namespace: str) -> None:
    rendered = fleet.rendered_gpus(plane, namespace)
    short = 0
    for name in NAMES:
        md = plane.mgmt.get(*MD, name, namespace)
        mine = [r for r in rendered if r.startswith(f"{name}-")]
        if len(mine) == REPLICAS:
            continue
        short += REPLICAS - len(mine)
        loud = [
            c
            for c in md["status"]["conditions"]
            if c["type"] in ("ReplicasScheduled", "ReplicasBound") and c["status"] == "False"
        ]
        assert loud and all(c.get("message") for c in loud), (name, md["status"]["conditions"])
        assert not live.is_true(md, "Ready"), name
    assert short == len(NAMES) * REPLICAS - POOL_GPUS // GPUS


def _clean(plane, namespace: str) -> None:
    """Deletes the deployments and their namespace (each round has its own namespace, so the
    next need not wait for this one to finish terminating)."""
    fleet.delete_namespace(plane, namespace)


@pytest.mark.parametrize("faults", [False, True], ids=["plain", "killed-mid-way"])
def test_competing_deployments_never_over_commit_the_pool(plane, faults: bool) -> None:
    fleet.ensure(plane)
    namespace = f"capacity-{'killed' if faults else 'plain'}"
    try:
        samples = _race(plane, namespace, faults=faults)
        assert samples and samples[-1] == POOL_GPUS, samples
        assert max(samples) <= POOL_GPUS
        per_replica = fleet.rendered_gpus(plane, namespace)
        assert len(per_replica) == POOL_GPUS // GPUS, per_replica
        _short_deployments_say_so(plane, namespace)
    finally:
        _clean(plane, namespace)
