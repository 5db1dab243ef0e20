"""The Kubernetes write path against a real kube-apiserver, as the reconciler's ServiceAccount
with only package/install/reconciler-rbac.yaml: scale get/patch, the annotation, Events,
list/watch."""

from __future__ import annotations

import copy
import json
import threading
import uuid

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from plnt_reconciler import kube
from plnt_reconciler.decision import Decision, Reason
from tests.reconcile.apiserver import (
    CRD,
    RBAC,
    RECONCILER_NAMESPACE,
    RECONCILER_TOKEN,
    RECONCILER_USER,
    REPO,
)


def model_deployment(namespace: str, name: str, replicas: int, **auto) -> dict:
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {
            "replicas": replicas,
            "autoscaling": {"targetTokensPerSecond": 50, "minReplicas": 1, "maxReplicas": 8} | auto,
        },
    }


@pytest.fixture(scope="module")
def namespace(kube_apiserver):
    name = f"kube-{uuid.uuid4().hex[:8]}"
    kube_apiserver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


@pytest.fixture(scope="module")
def cluster(kube_apiserver, tmp_path_factory):
    """The reconciler's own client, authenticated as its ServiceAccount."""
    path = tmp_path_factory.mktemp("kubeconfig") / "reconciler"
    api = kube.api_client(str(kube_apiserver.kubeconfig(path, RECONCILER_TOKEN)))
    yield kube.Kube(api)
    api.close()


def decision(from_: int, to: int, reason: Reason) -> Decision:
    return Decision(from_, to, 212.5, 50, reason, f"{from_} -> {to} for the test", to)


def test_scale_subresource_round_trip(kube_apiserver, namespace, cluster):
    kube_apiserver.create(model_deployment(namespace, "llama", 2))
    scale = cluster.read_scale(namespace, "llama")
    assert scale.replicas == 2
    assert scale.resource_version
    assert cluster.patch_scale(namespace, "llama", 5, scale.resource_version) == 5
    obj = kube_apiserver.admin.get(
        f"/apis/modelplane.ai/v1alpha1/namespaces/{namespace}/modeldeployments/llama"
    ).json()
    assert obj["spec"]["replicas"] == 5
    assert obj["spec"]["autoscaling"]["targetTokensPerSecond"] == 50  # untouched
    managers = {m["manager"] for m in obj["metadata"]["managedFields"]}
    assert kube.FIELD_MANAGER in managers


def test_scale_write_with_a_stale_resource_version_conflicts(kube_apiserver, namespace, cluster):
    kube_apiserver.create(model_deployment(namespace, "qwen", 1))
    before = cluster.read_scale(namespace, "qwen")
    cluster.patch_scale(namespace, "qwen", 2, before.resource_version)
    with pytest.raises(ApiException) as err:
        cluster.patch_scale(namespace, "qwen", 7, before.resource_version)
    assert err.value.status == 409
    assert "HTTP 409" in kube.api_error(err.value)
    assert cluster.read_scale(namespace, "qwen").replicas == 2


def test_annotation_and_event_record_the_decision(kube_apiserver, namespace, cluster):
    created = kube_apiserver.create(model_deployment(namespace, "mistral", 2))
    made = decision(2, 5, Reason.SCALE_UP)
    cluster.annotate(namespace, "mistral", made)
    event = cluster.event(created, made)
    obj = kube_apiserver.admin.get(
        f"/apis/modelplane.ai/v1alpha1/namespaces/{namespace}/modeldeployments/mistral"
    ).json()
    recorded = json.loads(obj["metadata"]["annotations"][kube.ANNOTATION])
    assert recorded == {
        "rate": 212.5,
        "target": 50,
        "from": 2,
        "to": 5,
        "why": "ScaleUp",
        "message": "2 -> 5 for the test",
    }
    assert event.metadata.name.startswith("mistral.")
    events = kube_apiserver.admin.get(f"/api/v1/namespaces/{namespace}/events").json()["items"]
    mine = [e for e in events if e["involvedObject"]["name"] == "mistral"]
    assert len(mine) == 1
    assert mine[0]["involvedObject"]["kind"] == "ModelDeployment"
    assert mine[0]["involvedObject"]["uid"] == created["metadata"]["uid"]
    assert (mine[0]["type"], mine[0]["reason"]) == ("Normal", "ScaleUp")
    assert mine[0]["source"]["component"] == kube.COMPONENT
    warning = cluster.event(created, decision(2, 2, Reason.METRICS_STALE))
    assert (warning.type, warning.reason) == ("Warning", "MetricsStale")


def test_rbac_grants_nothing_beyond_the_reconcilers_needs(kube_apiserver, namespace, cluster):
    kube_apiserver.create(model_deployment(namespace, "guarded", 1))
    with pytest.raises(ApiException) as err:
        cluster.custom.delete_namespaced_custom_object(
            kube.GROUP, kube.VERSION, namespace, kube.PLURAL, "guarded"
        )
    assert err.value.status == 403
    with pytest.raises(ApiException) as err:
        cluster.custom.create_namespaced_custom_object(
            kube.GROUP, kube.VERSION, namespace, kube.PLURAL, model_deployment(namespace, "x", 1)
        )
    assert err.value.status == 403
    with pytest.raises(ApiException) as err:
        cluster.core.list_namespaced_secret(namespace)
    assert err.value.status == 403


def test_cache_lists_then_follows_the_watch(kube_apiserver, namespace, cluster):
    kube_apiserver.create(model_deployment(namespace, "watched", 1))
    cache = kube.ModelDeploymentCache(cluster, watch_timeout_seconds=30)
    stop = threading.Event()
    seen: list[dict] = []
    original = cache.apply

    def record(event):
        seen.append(event)
        return original(event)

    cache.apply = record
    thread = threading.Thread(target=cache.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert cache.synced.wait(20)
        assert (namespace, "watched") in {
            kube.ModelDeploymentCache._key(m) for m in cache.snapshot()
        }
        kube_apiserver.create(model_deployment(namespace, "late", 3))
        path = f"/apis/modelplane.ai/v1alpha1/namespaces/{namespace}/modeldeployments/watched"
        assert kube_apiserver.admin.delete(path).status_code == 200
        deadline = threading.Event()
        for _ in range(80):
            keys = {kube.ModelDeploymentCache._key(m) for m in cache.snapshot()}
            if (namespace, "late") in keys and (namespace, "watched") not in keys:
                break
            deadline.wait(0.25)
        keys = {kube.ModelDeploymentCache._key(m) for m in cache.snapshot()}
        assert (namespace, "late") in keys
        assert (namespace, "watched") not in keys
        kinds = {(e["type"], e["object"]["metadata"]["name"]) for e in seen}
        assert ("ADDED", "late") in kinds
        assert ("DELETED", "watched") in kinds
    finally:
        stop.set()
        cache.close()
        thread.join(10)


def test_shipped_runtime_config_makes_a_valid_deployment(kube_apiserver):
    """package/install/settings.yaml's deploymentTemplate, completed as Crossplane's package
    runtime completes it (name, selector, labels, image, ServiceAccount), passes a server-side
    dry run with strict field validation: every field exists and validates."""
    docs = yaml.safe_load_all((REPO / "package" / "install" / "settings.yaml").read_text())
    (config,) = [d for d in docs if d["kind"] == "DeploymentRuntimeConfig"]
    account = config["spec"]["serviceAccountTemplate"]["metadata"]["name"]
    assert account == RECONCILER_USER.rsplit(":", 1)[1]
    deployment = copy.deepcopy(config["spec"]["deploymentTemplate"])
    labels = {"pkg.crossplane.io/revision": "plnt-plnt-reconciler-0123456789ab"}
    deployment |= {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "plnt-plnt-reconciler", "namespace": "plnt-system"},
    }
    spec = deployment["spec"]
    spec["selector"] = {"matchLabels": labels}
    spec["template"]["metadata"] = {"labels": labels}
    spec["template"]["spec"]["serviceAccountName"] = account
    (container,) = spec["template"]["spec"]["containers"]
    container["image"] = "xpkg.crossplane.io/plnt/plnt-reconciler:v0.1.0"
    reply = kube_apiserver.admin.post(
        "/apis/apps/v1/namespaces/plnt-system/deployments",
        params={"dryRun": "All", "fieldValidation": "Strict"},
        json=deployment,
    )
    assert reply.status_code == 201, reply.text
    [container] = reply.json()["spec"]["template"]["spec"]["containers"]
    assert container["args"][:2] == ["reconcile", "--bind"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert reply.json()["spec"]["strategy"]["type"] == "Recreate"


@pytest.fixture(scope="module")
def no_scale_cluster(kube_apiserver, cluster):
    """The same CRD without a scale subresource (as Crossplane v2.2 generates from an XRD), in
    group noscale.modelplane.ai, with the shipped ClusterRole's rules copied to that group."""
    group = "noscale.modelplane.ai"
    crd = yaml.safe_load(CRD.read_text())
    crd["metadata"]["name"] = f"modeldeployments.{group}"
    crd["spec"]["group"] = group
    del crd["spec"]["versions"][0]["subresources"]["scale"]
    kube_apiserver.create(crd)
    kube_apiserver.wait_established(f"modeldeployments.{group}")
    shipped = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "ClusterRole")
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "plnt-reconciler-noscale"},
        "rules": [
            r | {"apiGroups": [group]} for r in shipped["rules"] if r["apiGroups"] == [kube.GROUP]
        ],
    }
    kube_apiserver.create(role)
    kube_apiserver.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "plnt-reconciler-noscale"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "plnt-reconciler-noscale",
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": "plnt-reconciler",
                    "namespace": RECONCILER_NAMESPACE,
                }
            ],
        }
    )
    return group, kube.Kube(cluster.api, group=group)


def test_without_a_scale_subresource_spec_replicas_is_patched_directly(
    kube_apiserver, namespace, no_scale_cluster
):
    group, cluster = no_scale_cluster
    obj = model_deployment(namespace, "xrd-shaped", 2) | {"apiVersion": f"{group}/v1alpha1"}
    path = f"/apis/{group}/v1alpha1/namespaces/{namespace}/modeldeployments"
    assert kube_apiserver.admin.post(path, json=obj).status_code == 201
    assert kube_apiserver.admin.get(f"{path}/xrd-shaped/scale").status_code == 404
    scale = cluster.read_scale(namespace, "xrd-shaped")
    assert (scale.replicas, cluster.scale_subresource) == (2, False)
    assert cluster.patch_scale(namespace, "xrd-shaped", 6, scale.resource_version) == 6
    assert kube_apiserver.admin.get(f"{path}/xrd-shaped").json()["spec"]["replicas"] == 6
    with pytest.raises(ApiException) as err:  # the precondition still holds
        cluster.patch_scale(namespace, "xrd-shaped", 1, scale.resource_version)
    assert err.value.status == 409
    with pytest.raises(ApiException) as err:  # a missing object is still an error
        cluster.read_scale(namespace, "nobody")
    assert err.value.status == 404
