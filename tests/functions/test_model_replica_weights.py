"""Weights staged by an init container (plnt.work/weights-* annotations), through run_function.

The examples get the annotations a WorkflowRun sets; each case's whole response is in
tests/functions/responses/model_replica/ (its name starting `weights-`), the tests named for a
rule read the field it is about, and the rendered pods are checked, at the end, against
Kubernetes' own validation (tests/k8svalidate) and the LeaderWorkerSet CRD (crossplane beta
validate).
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_replica import fn, staging
from plnt import conditions, labels, weights, xp
from tests.conformance import crossplane_cli
from tests.functions import tables
from tests.functions.test_model_replica import (
    CACHE,
    GANG,
    PD,
    QWEN,
    READY,
    bound_case,
    composed,
    condition,
    engine_container,
    fatal,
    manifests,
    run,
)
from tests.k8svalidate import runner

S3 = "s3://plnt-models/qwen3-8b/bf16"


def with_weights(xr: dict, member: tuple[int, int] = (0, 0), **annotations: str) -> dict:
    """``xr`` with plnt.work/weights-* annotations on one member's template."""
    out = copy.deepcopy(xr)
    i, j = member
    template = out["spec"]["engines"][i]["members"][j]["template"]
    meta = template.setdefault("metadata", {})
    meta.setdefault("annotations", {}).update(
        {f"plnt.work/weights-{k.replace('_', '-')}": v for k, v in annotations.items()}
    )
    return out


def pods(workload: dict) -> dict[str, dict]:
    """Pod templates by role: a Deployment's one, or a LeaderWorkerSet's leader and worker."""
    if workload["kind"] == "Deployment":
        return {"Standalone": workload["spec"]["template"]}
    lws = workload["spec"]["leaderWorkerTemplate"]
    return {"Leader": lws["leaderTemplate"], "Worker": lws["workerTemplate"]}


def init(pod: dict, name: str = staging.INIT_CONTAINER) -> dict:
    return next(c for c in pod["spec"].get("initContainers") or [] if c["name"] == name)


def warnings(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]


# --- the cases: the examples with weights annotations, changed ----------------------------------


def observed_workload(scenario: Any, name: str, kind: str, status: dict) -> list[dict]:
    """The scenario's observed resources with the workload's observed status replaced."""
    observed = [
        o
        for o in copy.deepcopy(scenario.observed)
        if o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME] != name
    ]
    observed.append(
        {
            "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
            "kind": "Object",
            "metadata": {"name": name, "annotations": {xp.COMPOSITION_RESOURCE_NAME: name}},
            "status": {"atProvider": {"manifest": {"kind": kind, "status": status}}},
        }
    )
    return observed


def pod_object(collection: str, init_state: dict | None) -> dict:
    """An observe-only Object provider-kubernetes keeps for one pod of a collection."""
    status = {"phase": "Pending"}
    if init_state is not None:
        status["initContainerStatuses"] = [{"name": staging.INIT_CONTAINER, "state": init_state}]
    return {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {
            "name": f"{collection}-abcdef0",
            "namespace": READY.xr["metadata"].get("namespace", "default"),
            "labels": {"kubernetes.crossplane.io/owned-by-collection": collection},
        },
        "status": {"atProvider": {"manifest": {"kind": "Pod", "status": status}}},
    }


STARTING = {"replicas": 1, "availableReplicas": 0}


SCHEMES = {  # case: (the URI, its location as the downloader is given it)
    "weights-scheme-s3": ("s3://plnt-models/qwen3-8b/bf16", "plnt-models/qwen3-8b/bf16"),
    "weights-scheme-gs": ("gs://plnt-models/qwen3-8b", "plnt-models/qwen3-8b"),
    "weights-scheme-hf": ("hf://Qwen/Qwen3-8B@v2", "Qwen/Qwen3-8B@v2"),
    "weights-scheme-https": ("https://example.com/m/model.gguf", "example.com/m/model.gguf"),
}
ANNOTATIONS = 'spec.engines[0].members[0].template.metadata.annotations["plnt.work/weights-'
BAD = {  # case: (the annotations, the field path, why)
    "weights-bad-uri-scheme": ({"uri": "ftp://host/llama"}, 'uri"]', "unsupported scheme in"),
    "weights-bad-uri-local": (
        {"uri": "/local/llama"},
        'uri"]',
        "supported are s3://, gs://, hf://",
    ),
    "weights-bad-uri-no-location": ({"uri": "s3://"}, 'uri"]', "names no location"),
    "weights-bad-path-relative": ({"uri": S3, "path": "models"}, 'path"]', "not an absolute path"),
    "weights-bad-path-dotdot": ({"uri": S3, "path": "/a/../etc"}, 'path"]', "not an absolute path"),
    "weights-bad-path-root": ({"uri": S3, "path": "/"}, 'path"]', "not an absolute path"),
    "weights-bad-secret-name": (
        {"uri": S3, "secret": "Bad_Name"},
        'secret"]',
        "is not a Secret name",
    ),
}
READY_REASONS = {  # case: (the weights URI, the workload's status, the reason, what it says)
    "weights-ready-pods-none-available": (
        S3,
        {"replicas": 1, "availableReplicas": 0},
        conditions.PULLING_WEIGHTS,
        "engine qwen3-8b stages its weights from s3://plnt-models/qwen3-8b/bf16 into "
        "/models before it starts: its Deployment "
        "qwen3-8b-eks-l4-0-qwen3-8b has pods, 0/1 copies available",
    ),
    "weights-ready-no-pods-yet": (
        S3,
        {"replicas": 0},
        conditions.WAITING,
        "waits for its Deployment qwen3-8b-eks-l4-0-qwen3-8b: 0/1 copies available",
    ),
    "weights-ready-no-init-container": (
        None,
        {"replicas": 1, "availableReplicas": 0},
        conditions.WAITING,
        "waits for its Deployment qwen3-8b-eks-l4-0-qwen3-8b: 0/1 copies available",
    ),
    "weights-ready-presigned-url-redacted": (
        "https://u:pw@example.com/m.gguf?sig=s3cr3t",
        {"replicas": 1},
        conditions.PULLING_WEIGHTS,
        "from https://example.com/m.gguf into /models",
    ),
}
POD_STATES = {  # case: (the init container's state, the reason, what it says)
    "weights-pods-init-running": (
        {"running": {"startedAt": "2026-12-02T00:00:00Z"}},
        conditions.PULLING_WEIGHTS,
        "stages its weights from s3://plnt-models/qwen3-8b/bf16",
    ),
    "weights-pods-init-done-engine-loading": (
        {"terminated": {"exitCode": 0, "reason": "Completed"}},
        conditions.STARTING,
        "engine qwen3-8b is loading its weights (staged into /models)",
    ),
    "weights-pods-init-failed-retries": (
        {"terminated": {"exitCode": 1, "reason": "Error"}},
        conditions.PULLING_WEIGHTS,
        "stages its weights",
    ),
    "weights-pods-no-status-yet": (None, conditions.PULLING_WEIGHTS, "stages its weights"),
}
COLLECTION = "qwen3-8b-eks-l4-0-qwen3-8b-pods"


def qwen_case(name: str, **annotations: str) -> tables.Case:
    return bound_case(name, with_weights(QWEN.xr, **annotations), QWEN.required)


def starting_case(name: str, pods: list[dict], status: dict = STARTING) -> tables.Case:
    """The ready example staging from S3, its workload in `status`, `pods` observed."""
    observed = observed_workload(READY, "workload-qwen3-8b", "Deployment", status)
    return bound_case(name, with_weights(READY.xr, uri=S3), [*READY.required, *pods], observed)


def with_reserved_init_name() -> dict:
    xr = with_weights(QWEN.xr, uri=S3)
    containers = xr["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"]
    containers.append({"name": "stage-weights", "image": "busybox:1.37"})
    return xr


def cache_ready() -> list[dict]:
    required = copy.deepcopy(CACHE.required)
    cache = next(o for o in required if o["kind"] == "ModelCache")
    cache["status"] = {
        "pvcName": "qwen3-8b-weights",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
    }
    return required


TABLE = tables.Table(
    "model_replica",
    fn.run_function,
    (
        qwen_case("weights-standalone", uri=S3, path="/models"),
        qwen_case("weights-path-custom", uri=S3, path="/data/llm"),
        *(qwen_case(name, uri=uri) for name, (uri, _) in SCHEMES.items()),
        qwen_case("weights-secret", uri="hf://meta-llama/Llama-3.1-8B", secret="hf-token"),
        bound_case(
            "weights-gang",
            with_weights(GANG.xr, (0, 0), uri="gs://plnt-models/llama-405b"),
            GANG.required,
        ),
        bound_case(
            "weights-gang-member-own",
            with_weights(
                with_weights(GANG.xr, (0, 0), uri="gs://plnt-models/leader"),
                (0, 1),
                uri="s3://plnt-models/worker",
                path="/shard",
            ),
            GANG.required,
        ),
        bound_case(
            "weights-pd",
            with_weights(with_weights(PD.xr, (0, 0), uri=S3), (1, 0), uri=S3),
            PD.required,
        ),
        bound_case("weights-cache-wins", with_weights(CACHE.xr, uri=S3), CACHE.required),
        *(qwen_case(name, **annotations) for name, (annotations, _, _) in BAD.items()),
        bound_case("weights-init-name-reserved", with_reserved_init_name(), QWEN.required),
        bound_case(
            "weights-second-engine-bad-scheme",
            with_weights(PD.xr, (1, 0), uri="ftp://x/y"),
            PD.required,
        ),
        *(
            bound_case(
                name,
                with_weights(READY.xr, uri=uri) if uri else READY.xr,
                READY.required,
                observed_workload(READY, "workload-qwen3-8b", "Deployment", status),
            )
            for name, (uri, status, _, _) in READY_REASONS.items()
        ),
        starting_case("weights-starting", []),
        *(
            starting_case(name, [pod_object(COLLECTION, state)])
            for name, (state, _, _) in POD_STATES.items()
        ),
        starting_case(
            "weights-pods-of-another-collection",
            [pod_object("someone-elses-pods", {"terminated": {"exitCode": 0}})],
        ),
        starting_case("weights-copy-available", [], {"replicas": 1, "availableReplicas": 1}),
        bound_case(
            "weights-gang-none-ready",
            with_weights(GANG.xr, (0, 0), uri=S3),
            GANG.required,
            observed_workload(
                GANG, "workload-llama-405b", "LeaderWorkerSet", {"replicas": 1, "readyReplicas": 0}
            ),
        ),
        bound_case(
            "weights-cache-ready",
            with_weights(CACHE.xr, uri=S3),
            cache_ready(),
            observed_workload(CACHE, "workload-qwen3-8b", "Deployment", {"replicas": 2}),
        ),
    ),
)
response = TABLE.response_named


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


# --- the init container and the engine's mount -------------------------------------------------


def test_standalone_pod_downloads_into_an_empty_dir_the_engine_mounts_read_only() -> None:
    rsp = response("weights-standalone")
    assert fatal(rsp) == ""
    assert warnings(rsp) == []
    pod = manifests(rsp)["workload-qwen3-8b"]["spec"]["template"]
    (container,) = pod["spec"]["initContainers"]
    assert container == {
        "name": "stage-weights",
        "image": "amazon/aws-cli:2.27.50",
        "command": ["/bin/sh", "-c", 'exec aws s3 sync "s3://$LOCATION" "$DEST"'],
        "env": [
            {"name": "LOCATION", "value": "plnt-models/qwen3-8b/bf16"},
            {"name": "DEST", "value": "/models"},
        ],
        "volumeMounts": [{"name": "weights", "mountPath": "/models"}],
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
    }
    assert pod["spec"]["volumes"] == [{"name": "weights", "emptyDir": {}}]
    engine = engine_container(pod)
    assert engine["volumeMounts"] == [{"name": "weights", "mountPath": "/models", "readOnly": True}]
    assert engine["image"] == "vllm/vllm-openai:v0.23.0"  # the user's engine is untouched
    assert "envFrom" not in engine
    assert pod["metadata"]["annotations"][labels.WEIGHTS_URI] == S3


def test_path_defaults_to_models_and_follows_the_annotation() -> None:
    default = manifests(response("weights-scheme-s3"))["workload-qwen3-8b"]
    pod = default["spec"]["template"]
    assert init(pod)["volumeMounts"] == [{"name": "weights", "mountPath": "/models"}]
    assert engine_container(pod)["volumeMounts"][0]["mountPath"] == "/models"
    custom = response("weights-path-custom")
    pod = manifests(custom)["workload-qwen3-8b"]["spec"]["template"]
    assert init(pod)["volumeMounts"] == [{"name": "weights", "mountPath": "/data/llm"}]
    assert {"name": "DEST", "value": "/data/llm"} in init(pod)["env"]
    assert engine_container(pod)["volumeMounts"] == [
        {"name": "weights", "mountPath": "/data/llm", "readOnly": True}
    ]


@pytest.mark.parametrize("name", SCHEMES)
def test_each_scheme_uses_the_shared_downloader(name: str) -> None:
    uri, location = SCHEMES[name]
    pod = manifests(response(name))["workload-qwen3-8b"]
    container = init(pod["spec"]["template"])
    downloader = weights.DOWNLOADERS[weights.scheme(uri)]
    assert container["image"] == downloader.image
    assert container["command"] == ["/bin/sh", "-c", downloader.script]
    assert container["env"][:2] == [
        {"name": "LOCATION", "value": location},
        {"name": "DEST", "value": "/models"},
    ]
    assert uri not in container["command"][-1]  # the URI reaches the script only as env


def test_credentials_come_from_the_named_secret_on_the_downloader_only() -> None:
    pod = manifests(response("weights-secret"))["workload-qwen3-8b"]["spec"]["template"]
    container = init(pod)
    assert container["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "LOCATION": "meta-llama/Llama-3.1-8B",
        "DEST": "/models",
        "REPO": "meta-llama/Llama-3.1-8B",
        "REVISION": "main",
    }
    assert "envFrom" not in engine_container(pod)


def test_gang_leader_and_workers_all_stage_the_leaders_weights() -> None:
    lws = manifests(response("weights-gang"))["workload-llama-405b"]
    assert lws["kind"] == "LeaderWorkerSet"
    got = pods(lws)
    assert set(got) == {"Leader", "Worker"}
    for pod in got.values():
        assert init(pod)["image"] == weights.DOWNLOADERS["gs"].image
        assert {"name": "LOCATION", "value": "plnt-models/llama-405b"} in init(pod)["env"]
        assert pod["spec"]["volumes"] == [{"name": "weights", "emptyDir": {}}]
        assert {"name": "weights", "mountPath": "/models", "readOnly": True} in engine_container(
            pod
        )["volumeMounts"]


def test_gang_member_with_its_own_annotation_keeps_it() -> None:
    got = pods(manifests(response("weights-gang-member-own"))["workload-llama-405b"])
    assert init(got["Leader"])["image"] == weights.DOWNLOADERS["gs"].image
    assert init(got["Worker"])["image"] == weights.DOWNLOADERS["s3"].image
    assert init(got["Worker"])["volumeMounts"] == [{"name": "weights", "mountPath": "/shard"}]


def test_decode_pod_stages_weights_before_its_routing_sidecar() -> None:
    got = manifests(response("weights-pd"))
    workloads = [m for m in got.values() if m["kind"] == "Deployment" and "template" in m["spec"]]
    orders = sorted(
        [c["name"] for c in m["spec"]["template"]["spec"].get("initContainers", [])]
        for m in workloads
        if labels.PHASE in m["spec"]["template"]["metadata"]["labels"]
    )
    assert orders == [["stage-weights"], ["stage-weights", "routing-sidecar"]]


def test_a_model_cache_wins_over_the_annotation_with_a_warning() -> None:
    rsp = response("weights-cache-wins")
    assert fatal(rsp) == ""
    pod = manifests(rsp)["workload-qwen3-8b"]["spec"]["template"]
    assert "initContainers" not in pod["spec"]
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["model-cache"]
    assert engine_container(pod)["volumeMounts"] == [
        {"name": "model-cache", "mountPath": "/models", "readOnly": True}
    ]
    (warning,) = [w for w in warnings(rsp) if "modelCacheRef" in w]
    assert "plnt.work/weights-uri annotation of engine(s) qwen3-8b" in warning
    assert "no weights init container" in warning


# --- bad annotations are Fatal with the field path -------------------------------------------


@pytest.mark.parametrize("name", BAD)
def test_bad_annotations_are_fatal_naming_the_annotation(name: str) -> None:
    _, field, why = BAD[name]
    path = ANNOTATIONS + field
    rsp = response(name)
    message = fatal(rsp)
    assert message.startswith(f"invalid input: {path}: ")
    assert why in message
    assert not rsp.desired.resources


def test_the_init_container_name_is_reserved() -> None:
    message = fatal(response("weights-init-name-reserved"))
    assert "spec.engines[0].members[0].template.spec.containers[1].name" in message


def test_a_wrong_scheme_in_the_second_engine_names_that_engine() -> None:
    message = fatal(response("weights-second-engine-bad-scheme"))
    assert "spec.engines[1].members[0].template.metadata.annotations" in message


# --- PullingWeights: pods exist, no copy available, weights staged by an init container --------


@pytest.mark.parametrize("name", READY_REASONS)
def test_workloads_ready_reason(name: str) -> None:
    _, _, reason, says = READY_REASONS[name]
    rsp = response(name)
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.reason == reason
    assert says in cond.message
    assert "s3cr3t" not in cond.message and "pw@" not in cond.message
    assert rsp.desired.resources["workload-qwen3-8b"].ready == fnv1.READY_FALSE


def manifest_of(rsp: fnv1.RunFunctionResponse, name: str) -> dict:
    return composed(rsp)[name]["spec"]["forProvider"]["manifest"]


def test_a_starting_staged_engine_watches_its_pods() -> None:
    rsp = response("weights-starting")
    collection = composed(rsp)["pods-qwen3-8b"]
    assert collection["kind"] == "ObservedObjectCollection"
    assert collection["metadata"]["name"] == "qwen3-8b-eks-l4-0-qwen3-8b-pods"
    watched = collection["spec"]["observeObjects"]
    assert (watched["apiVersion"], watched["kind"]) == ("v1", "Pod")
    workload = manifest_of(rsp, "workload-qwen3-8b")
    assert watched["selector"]["matchLabels"] == workload["spec"]["selector"]["matchLabels"]
    assert watched["namespace"] == workload["metadata"]["namespace"]
    wanted = rsp.requirements.resources["pods-qwen3-8b"]
    assert (wanted.api_version, wanted.kind) == ("kubernetes.m.crossplane.io/v1alpha1", "Object")
    assert dict(wanted.match_labels.labels) == {
        "kubernetes.crossplane.io/owned-by-collection": "qwen3-8b-eks-l4-0-qwen3-8b-pods"
    }
    assert rsp.desired.resources["pods-qwen3-8b"].ready == fnv1.READY_TRUE


@pytest.mark.parametrize("name", POD_STATES)
def test_the_pods_tell_staging_from_loading(name: str) -> None:
    _, reason, says = POD_STATES[name]
    rsp = response(name)
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_FALSE, reason)
    assert says in cond.message


def test_pods_of_another_collection_do_not_count() -> None:
    rsp = response("weights-pods-of-another-collection")
    assert condition(rsp, conditions.WORKLOADS_READY).reason == conditions.PULLING_WEIGHTS


def test_once_a_copy_is_available_the_replica_is_ready_again() -> None:
    rsp = response("weights-copy-available")
    cond = condition(rsp, conditions.WORKLOADS_READY)
    assert (cond.status, cond.reason) == (fnv1.STATUS_CONDITION_TRUE, conditions.AVAILABLE)
    assert "pods-qwen3-8b" not in rsp.desired.resources  # the pods are no longer watched
    assert "pods-qwen3-8b" not in rsp.requirements.resources


def test_a_gang_with_groups_but_none_ready_is_pulling_weights() -> None:
    cond = condition(response("weights-gang-none-ready"), conditions.WORKLOADS_READY)
    assert cond.reason == conditions.PULLING_WEIGHTS
    assert "its LeaderWorkerSet" in cond.message


def test_with_a_model_cache_it_is_never_pulling_weights() -> None:
    rsp = response("weights-cache-ready")
    assert "workload-qwen3-8b" in composed(rsp)
    assert condition(rsp, conditions.WORKLOADS_READY).reason == conditions.WAITING


# --- what the cluster would say about the pods -------------------------------------------------


def staged_workloads() -> list[dict]:
    qwen = manifests(run(with_weights(QWEN.xr, uri=S3, secret="s3-creds"), QWEN.required))
    gang = manifests(run(with_weights(GANG.xr, uri="hf://meta-llama/L@v1"), GANG.required))
    pd = manifests(run(with_weights(with_weights(PD.xr, uri=S3), (1, 0), uri=S3), PD.required))
    out = [qwen["workload-qwen3-8b"], gang["workload-llama-405b"]]
    out += [m for m in pd.values() if m["kind"] == "Deployment"]
    assert sum("initContainers" in p["spec"] for m in out for p in pods_of(m)) == 5
    return out


def pods_of(workload: dict) -> list[dict]:
    if workload["kind"] == "Deployment":
        return [workload["spec"]["template"]]
    return list(pods(workload).values())


def test_staged_workloads_pass_kubernetes_validation(k8svalidate: pathlib.Path) -> None:
    found = [m for m in staged_workloads() if runner.supported(m)]
    assert {m["kind"] for m in found} == {"Deployment", "LeaderWorkerSet"}
    verdicts = runner.validate(k8svalidate, found)
    assert len(verdicts) == len(found)
    assert {f"{v.kind}/{v.name}": v.errors for v in verdicts if v.errors} == {}


def test_staged_leader_worker_set_passes_its_crd(
    crank: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    found = [m for m in staged_workloads() if m["kind"] == "LeaderWorkerSet"]
    proc = crossplane_cli.validate(crank, crossplane_cli.third_party_crds(), found, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 success cases" in proc.stdout
