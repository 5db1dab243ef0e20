"""How long one replica takes to start on an e2e workload cluster, beside kwok's own delays.

    .venv/bin/python -m tests.e2e.replica_start [--replicas N]
    PLNT_ETCD=/usr/bin/etcd .venv/bin/python -m tests.e2e.replica_start   # another etcd

Brings up a bare workload cluster as the e2e suite runs it (etcd and kube-apiserver,
kube-controller-manager, kube-scheduler and kwok with its Stages: tests/e2e/workload.py), adds
one Node, then starts N one-replica Deployments one after another, each pod with an init
container staging its weights and an engine container, and waits for each pod to be Ready. For
each it prints the seconds from the pod's creation to its being bound and started, to its init
containers' end, and to Ready (the API server's timestamps, whole seconds), against the Stages'
delays (STAGING_SECONDS, then ENGINE_START_SECONDS). Whatever a stage takes beyond its delay is
the cluster's own lag: the scheduler, kwok seeing the pod change, the API server and etcd.

Last, it says whether kwok's log has the API server refusing its streaming watch-lists (an
etcd without watch progress requests), which restarts kwok's watches.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from tests.e2e import kube, live, workload
from tests.e2e.kube import CA, APIServer, Processes
from tests.reconcile.apiserver import ETCD

NAMESPACE = "bench"
NODE = "bench-0"
NODE_LABELS = {"modelplane.ai/pool": "bench"}
WATCH_LIST_REFUSED = "RequestWatchProgress is disabled"


def _deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": NODE_LABELS,
                    "initContainers": [{"name": "stage-weights", "image": "busybox"}],
                    "containers": [{"name": "engine", "image": "vllm"}],
                },
            },
        },
    }


def _time(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _stages(pod: dict[str, Any]) -> dict[str, float]:
    """Seconds from the pod's creation to each stage, read from its own timestamps."""
    status = pod["status"]
    created = _time(pod["metadata"]["creationTimestamp"])
    (init,) = status["initContainerStatuses"]
    (ready,) = (c for c in status["conditions"] if c["type"] == "Ready")
    return {
        "started": (_time(status["startTime"]) - created).total_seconds(),
        "initialized": (_time(init["state"]["terminated"]["finishedAt"]) - created).total_seconds(),
        "ready": (_time(ready["lastTransitionTime"]) - created).total_seconds(),
    }


def measure(workdir: pathlib.Path, replicas: int) -> list[dict[str, float]]:
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    procs = Processes(workdir / "logs")
    try:
        api = APIServer(
            "bench",
            workdir / "cluster",
            procs,
            CA.make(),
            {"plnt-bench": ("admin", "system:masters")},
        )
        workload.start("bench", procs, api.kubeconfig(workdir / "cluster" / "kubeconfig"))
        api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        workload.add_node(api, NODE, labels=NODE_LABELS)
        live.wait_ready(api, "v1", "Node", NODE, seconds=120)
        results = []
        for i in range(replicas):
            name = f"replica-{i}"
            api.apply(_deployment(name))

            def ready_pod(name: str = name) -> dict[str, Any] | None:
                pods = api.list("v1", "Pod", namespace=NAMESPACE, labels={"app": name})
                return pods[0] if pods and _ready(pods[0]) else None

            pod = kube.wait_for(ready_pod, 180, f"{name}'s pod Ready")
            results.append(_stages(pod))
        kwok_log = procs.tail("bench-kwok", chars=10**8)
        refused = kwok_log.count(WATCH_LIST_REFUSED)
        print(f"kwok's log: {refused} lines with {WATCH_LIST_REFUSED!r}")
        return results
    finally:
        procs.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=3)
    args = parser.parse_args()
    version = subprocess.run(
        [str(ETCD), "--version"], capture_output=True, text=True, check=True
    ).stdout.splitlines()[0]
    staging, engine = workload.STAGING_SECONDS, workload.ENGINE_START_SECONDS
    with tempfile.TemporaryDirectory(prefix="plnt-replica-start-") as tmp:
        results = measure(pathlib.Path(tmp), args.replicas)
    print(f"{version}; kwok's delays: staging {staging:.0f} s, engine start {engine:.0f} s")
    print("seconds from each pod's creation to: started  initialized  ready  (ready - delays)")
    for i, r in enumerate(results):
        lag = r["ready"] - staging - engine
        print(
            f"  replica-{i:<24} {r['started']:9.0f} {r['initialized']:12.0f} {r['ready']:6.0f}"
            f"  {lag:+.0f}"
        )
    median = statistics.median(r["ready"] for r in results)
    print(f"median pod creation to Ready: {median:.0f} s (the delays: {staging + engine:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
