"""The LeaderWorkerSet controller on a workload cluster that has gang replicas, run for real.

What is real: everything LWS does. lws-manager (sigs.k8s.io/lws, the version
hack/install-workload-tools.sh built, v0.7.0) runs its LeaderWorkerSet and Pod controllers and
serves its own admission webhooks: the LeaderWorkerSet defaulter and validator, and the Pod
defaulter that gives each gang pod its group-index / worker-index / group-key labels and the
LWS_LEADER_ADDRESS, LWS_GROUP_SIZE and LWS_WORKER_INDEX variables. The CRD is the one from the
same module (config/crd/bases), and the webhook configurations are the module's
config/webhook/manifests.yaml with its kustomize patches (the Pod webhooks' objectSelector on
``leaderworkerset.sigs.k8s.io/name``) and config/default's ``lws-`` name prefix, as a release
installs them. So the kube-controller-manager's StatefulSet controller makes the gang's pods,
LWS's webhook labels them, the real kube-scheduler binds them and allocates their claims.

What is configured: the webhook's serving certificate. lws-manager's internal cert rotation
(internalCertManagement, its default) writes a Secret and signs for the webhook Service's DNS
name, which the API server resolves through a Service and Endpoints no loopback cluster has.
It is turned off (``internalCertManagement.enable: false``, a setting LWS documents for using
cert-manager instead) and the test CA signs a certificate for 127.0.0.1, put where the
Configuration's ``webhook.certDir`` says; the webhook configurations point at
``https://127.0.0.1:<port><path>`` with that CA as their caBundle. Leader election is off (one
replica), the metrics and health-probe servers are disabled ("0"), and the webhook binds
127.0.0.1 only. The CRD is installed without the conversion webhook config/crd's kustomize
patch adds: it has one version (v1), so the API server never converts.

Why the CRD comes from the module the binary was built from and not third_party/crds: the
vendored leaderworkersets CRD is lws main at v0.10.0 (third_party/crds/SOURCES.md), copied byte
for byte from the project's shared folder (tests/unit/test_vendored.py holds it to that), while
the controller here is v0.7.0. hack/install-workload-tools.sh keeps that module's config/crd and
config/webhook under .tools/lws-<version>, so the CRD is exactly the binary's.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import pathlib
import subprocess
import time
from typing import Any

import httpx
import yaml

from tests.e2e.kube import CA, APIServer, Processes
from tests.reconcile.apiserver import TOOLS, free_port

LWS_MANAGER = TOOLS / "lws-manager"
MODULE = "sigs.k8s.io/lws"
CRD_NAME = "leaderworkersets.leaderworkerset.x-k8s.io"
API = "leaderworkerset.x-k8s.io/v1"
# config/default/kustomization.yaml's namePrefix
NAME_PREFIX = "lws-"
# The labels LWS (its controller's StatefulSet templates and its Pod webhook) puts on each pod.
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"


def version() -> str:
    """The LWS version of .tools/bin/lws-manager, from the build's stamp beside it."""
    stamps = sorted(TOOLS.glob(".lws-manager-v*"))
    if len(stamps) != 1 or not LWS_MANAGER.is_file():
        raise FileNotFoundError(f"{LWS_MANAGER} (or its version stamp) is missing: run `make test`")
    return stamps[0].name.removeprefix(".lws-manager-")


@functools.cache
def module_dir() -> pathlib.Path:
    """What hack/install-workload-tools.sh kept of sigs.k8s.io/lws@<version> (its config/crd
    and config/webhook) beside the binary, under .tools/lws-<version>."""
    path = TOOLS.parent / f"lws-{version()}"
    if not (path / "config" / "webhook").is_dir():
        raise FileNotFoundError(f"{path} is missing: run hack/install-workload-tools.sh")
    return path


def crd() -> dict[str, Any]:
    return yaml.safe_load(
        (
            module_dir() / "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
        ).read_text()
    )


def webhook_configurations(port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """config/webhook/manifests.yaml with that folder's kustomize patches (JSON 6902 replaces
    of whole webhooks) and the ``lws-`` prefix, each webhook's Service reference turned into
    ``https://127.0.0.1:<port><its path>`` trusting ``ca_bundle``."""
    folder = module_dir() / "config/webhook"
    docs = [d for d in yaml.safe_load_all((folder / "manifests.yaml").read_text()) if d]
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    for patch in kustomization.get("patches") or []:
        target = patch["target"]
        (doc,) = (
            d
            for d in docs
            if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]
        )
        for op in yaml.safe_load((folder / patch["path"]).read_text()):
            _, field, index = op["path"].split("/")
            if op["op"] != "replace" or field != "webhooks":
                raise ValueError(f"{patch['path']}: unexpected patch {op}")
            doc["webhooks"][int(index)] = op["value"]
    bundle = base64.b64encode(ca_bundle).decode()
    out = []
    for source in docs:
        doc = copy.deepcopy(source)
        doc["metadata"]["name"] = NAME_PREFIX + doc["metadata"]["name"]
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
        out.append(doc)
    return out


def configuration(port: int, cert_dir: pathlib.Path) -> dict[str, Any]:
    """lws-manager's Configuration (config.lws.x-k8s.io/v1alpha1, api/config in the module)."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": "0"},
    }


def start(
    name: str,
    procs: Processes,
    api: APIServer,
    ca: CA,
    workdir: pathlib.Path,
    *,
    seconds: float = 90,
) -> subprocess.Popen:
    """LWS on cluster ``name`` (served by ``api``): its CRD if the cluster lacks one (an
    existing CRD is left as it is), lws-manager serving its webhooks on a loopback port, and
    the webhook configurations; returns once the webhooks answer (a dry-run LeaderWorkerSet
    create passes the mutating and validating LWS webhooks, which fail closed)."""
    running = procs.running.get(f"{name}-lws-manager")
    if running is not None and running.poll() is None:
        return running  # one controller per cluster, however often its set-up is applied
    workdir.mkdir(parents=True, exist_ok=True)
    if api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD_NAME) is None:
        api.create_crds([crd()])
    port = free_port()
    cert_dir = ca.write_dir(workdir / "webhook-certs", ca.server(f"{name}-lws-webhook"))
    config = workdir / "lws-config.yaml"
    config.write_text(yaml.safe_dump(configuration(port, cert_dir)))
    kubeconfig = api.kubeconfig(workdir / "lws-kubeconfig")
    proc = procs.start(
        f"{name}-lws-manager",
        [str(LWS_MANAGER), f"--config={config}", f"--kubeconfig={kubeconfig}"],
    )
    for doc in webhook_configurations(port, ca.pair.cert):
        api.apply(doc)
    _wait_webhooks(name, procs, api, proc, seconds)
    return proc


# The smallest LeaderWorkerSet the validating webhook accepts: dry-run only, never stored.
_PROBE = {
    "apiVersion": API,
    "kind": "LeaderWorkerSet",
    "metadata": {"name": "plnt-lws-webhook-probe", "namespace": "default"},
    "spec": {
        "leaderWorkerTemplate": {
            "size": 1,
            "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "probe"}]}},
        }
    },
}


def _wait_webhooks(
    name: str, procs: Processes, api: APIServer, proc: subprocess.Popen, seconds: float
) -> None:
    path = api.path(API, "LeaderWorkerSet", namespace="default")
    log = f"{name}-lws-manager"
    deadline = time.monotonic() + seconds
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{log} exited ({proc.returncode}):\n{procs.tail(log)}")
        try:
            r = api.http.post(
                path,
                params={"dryRun": "All"},
                headers={"Content-Type": "application/json"},
                content=json.dumps(_PROBE),
            )
        except httpx.HTTPError as err:
            last = repr(err)
        else:
            if r.status_code == 201:
                return
            last = r.text  # before it serves: "failed calling webhook ... connection refused"
        time.sleep(0.5)
    raise TimeoutError(
        f"LWS webhooks on {name} not answering after {seconds:.0f}s (last: {last})\n"
        f"{procs.tail(log)}"
    )
