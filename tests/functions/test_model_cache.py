"""function-model-cache through its real run_function, with Crossplane's requirement loop.

Inputs are the example scenario examples/model-cache, changed per test.
"""

from __future__ import annotations

import copy
import pathlib

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_cache import fn
from plnt import weights, xp
from plnt_host import render
from tests.support import call_function

REPO = pathlib.Path(__file__).resolve().parents[2]
CACHE = render.load_scenario(REPO / "examples" / "model-cache")


def run(xr: dict, required: list[dict] = (), observed: list[dict] = ()) -> fnv1.RunFunctionResponse:
    """Calls the function until its requirements are stable, answering them from `required`."""
    return call_function(fn.run_function, xr, required, observed, "function-model-cache")


def manifests(rsp: fnv1.RunFunctionResponse) -> dict[str, dict]:
    return {
        name: xp.to_dict(r.resource)["spec"]["forProvider"]["manifest"]
        for name, r in rsp.desired.resources.items()
    }


def condition(rsp: fnv1.RunFunctionResponse) -> fnv1.Condition:
    return next(c for c in rsp.conditions if c.type == fn.WEIGHTS_STAGED)


def with_source(uri: str, **extra: str) -> dict:
    xr = copy.deepcopy(CACHE.xr)
    xr["spec"]["source"] = {"uri": uri, **extra}
    return xr


def job_observed(status: dict) -> list[dict]:
    observed = copy.deepcopy(CACHE.observed)
    rsp = run(CACHE.xr, CACHE.required, observed)
    job = xp.to_dict(rsp.desired.resources["job"].resource)
    job["metadata"] = {"name": "qwen3-8b-job", "annotations": {xp.COMPOSITION_RESOURCE_NAME: "job"}}
    manifest = copy.deepcopy(job["spec"]["forProvider"]["manifest"])
    manifest["status"] = status
    job["status"] = {"atProvider": {"manifest": manifest}}
    return [*observed, job]


def test_example_composes_pvc_and_staging_job_on_the_cluster() -> None:
    rsp = run(CACHE.xr, CACHE.required, CACHE.observed)
    got = manifests(rsp)
    assert set(got) == {"namespace", "pvc", "job"}
    for name in got:
        obj = xp.to_dict(rsp.desired.resources[name].resource)
        assert obj["spec"]["providerConfigRef"] == {
            "kind": "ClusterProviderConfig",
            "name": "eks-l4",
        }
    pvc = got["pvc"]
    assert pvc["metadata"] == {
        "name": "qwen3-8b-weights",
        "namespace": "ml-team",
        "labels": {"modelplane.ai/model-cache": "qwen3-8b"},
    }
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "40Gi"}},
        "storageClassName": "efs-rwx",
    }
    pod = got["job"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == weights.DOWNLOADERS["hf"].image
    assert container["command"] == weights.DOWNLOADERS["hf"].command
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "LOCATION": "Qwen/Qwen3-8B@main",
        "DEST": "/cache",
        "REPO": "Qwen/Qwen3-8B",
        "REVISION": "main",
    }
    assert container["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    assert pod["volumes"] == [
        {"name": "weights", "persistentVolumeClaim": {"claimName": "qwen3-8b-weights"}}
    ]
    assert xp.to_dict(rsp.desired.composite.resource)["status"] == {"pvcName": "qwen3-8b-weights"}
    assert condition(rsp).status == fnv1.STATUS_CONDITION_FALSE
    assert rsp.desired.resources["job"].ready == fnv1.READY_FALSE
    assert rsp.desired.resources["pvc"].ready == fnv1.READY_TRUE


@pytest.mark.parametrize(
    ("uri", "image", "location"),
    [
        ("s3://plnt-models/qwen3-8b/bf16", "amazon/aws-cli", "plnt-models/qwen3-8b/bf16"),
        ("gs://plnt-models/qwen3-8b", "google-cloud-cli", "plnt-models/qwen3-8b"),
        ("hf://Qwen/Qwen3-8B", "python", "Qwen/Qwen3-8B"),
        ("https://example.com/m/model.gguf", "curlimages/curl", "example.com/m/model.gguf"),
    ],
)
def test_a_downloader_per_scheme_reads_the_source_from_env(
    uri: str, image: str, location: str
) -> None:
    job = manifests(run(with_source(uri), CACHE.required))["job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert image in container["image"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["LOCATION"] == location
    assert env["DEST"] == container["volumeMounts"][0]["mountPath"] == "/cache"
    assert container["command"] == weights.DOWNLOADERS[weights.scheme(uri)].command
    assert '"$DEST' in container["command"][-1]  # writes into the mounted cache
    assert uri not in container["command"][-1]  # the script never embeds the URI
    assert "envFrom" not in container


def test_hf_revision_defaults_to_main() -> None:
    job = manifests(run(with_source("hf://Qwen/Qwen3-8B"), CACHE.required))["job"]
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["REVISION"] == "main"


def test_a_new_source_stages_with_a_new_job() -> None:
    first = manifests(run(with_source("s3://a/b"), CACHE.required))["job"]["metadata"]["name"]
    second = manifests(run(with_source("s3://a/c"), CACHE.required))["job"]["metadata"]["name"]
    assert first != second
    assert first.startswith("qwen3-8b-stage-")


def test_staged_when_the_job_succeeded() -> None:
    rsp = run(CACHE.xr, CACHE.required, job_observed({"succeeded": 1}))
    assert condition(rsp).status == fnv1.STATUS_CONDITION_TRUE
    assert all(r.ready == fnv1.READY_TRUE for r in rsp.desired.resources.values())


def test_failed_job_says_so() -> None:
    failed = {
        "failed": 5,
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
    }
    rsp = run(CACHE.xr, CACHE.required, job_observed(failed))
    cond = condition(rsp)
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.reason == "Failed"
    assert "BackoffLimitExceeded" in cond.message


def test_storage_class_comes_from_the_cluster_or_is_left_out() -> None:
    xr = copy.deepcopy(CACHE.xr)
    del xr["spec"]["storageClassName"]
    cluster = copy.deepcopy(CACHE.required[0])
    cluster["status"]["cache"] = {"storageClassName": "plnt-shared-vast"}
    assert manifests(run(xr, [cluster]))["pvc"]["spec"]["storageClassName"] == "plnt-shared-vast"
    assert "storageClassName" not in manifests(run(xr, CACHE.required))["pvc"]["spec"]


@pytest.mark.parametrize(
    ("required", "wants"),
    [
        ([], "InferenceCluster eks-l4 not found"),
        (
            [{**CACHE.required[0], "status": {}}],
            "InferenceCluster eks-l4 has no providerConfigRef yet",
        ),
    ],
    ids=["missing", "no-provider-config"],
)
def test_unreachable_cluster_composes_nothing(required: list[dict], wants: str) -> None:
    rsp = run(CACHE.xr, required)
    assert not rsp.desired.resources
    assert wants in condition(rsp).message
    assert rsp.desired.composite.ready == fnv1.READY_FALSE


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("source", {"uri": "ftp://example.com/model"}, "spec.source.uri"),
        ("size", "lots", "spec.size"),
        ("clusterName", "", "spec.clusterName"),
    ],
)
def test_invalid_input_is_fatal(field: str, value: object, path: str) -> None:
    xr = copy.deepcopy(CACHE.xr)
    xr["spec"][field] = value
    rsp = run(xr, CACHE.required)
    (result,) = [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert result.message.startswith(f"invalid input: {path}")


def test_a_presigned_url_never_reaches_the_conditions() -> None:
    uri = "https://user:pw@example.com/m/model.gguf?X-Amz-Signature=s3cr3t#frag"
    rsp = run(with_source(uri), CACHE.required)
    message = condition(rsp).message
    assert "example.com/m/model.gguf" in message
    assert "s3cr3t" not in message and "pw@" not in message and "frag" not in message


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("s3://bucket/prefix", None),
        ("hf://Qwen/Qwen3-8B@v1", None),
        ("ftp://host/file", "unsupported scheme in 'ftp://host/file': supported are s3://, gs://"),
        ("/models/llama", "unsupported scheme in '/models/llama'"),
        ("s3://", "'s3://' names no location"),
        ("gs://bucket/with space", "names no location"),
    ],
)
def test_shared_table_says_which_uris_it_can_stage(uri: str, why: str | None) -> None:
    got = weights.unsupported(uri)
    assert (got is None) == (why is None)
    assert why is None or why in got


def test_shared_table_env_carries_destination_and_hf_revision() -> None:
    assert weights.source_env("hf://Qwen/Qwen3-8B@v1", "/models") == [
        {"name": "LOCATION", "value": "Qwen/Qwen3-8B@v1"},
        {"name": "DEST", "value": "/models"},
        {"name": "REPO", "value": "Qwen/Qwen3-8B"},
        {"name": "REVISION", "value": "v1"},
    ]
    assert weights.source_env("s3://b/p", "/w") == [
        {"name": "LOCATION", "value": "b/p"},
        {"name": "DEST", "value": "/w"},
    ]


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("https://u:pw@example.com/m/x.gguf?X-Amz-Signature=1#f", "https://example.com/m/x.gguf"),
        ("s3://bucket/prefix?versionId=3", "s3://bucket/prefix"),
        ("hf://gpt2@main", "hf://gpt2@main"),  # a revision, not user info
        ("https://[broken/x", "https://[broken/x"),  # never raises
        ("/local/path?x", "/local/path"),
    ],
)
def test_display_drops_user_info_query_and_fragment(uri: str, shown: str) -> None:
    assert weights.display(uri) == shown
