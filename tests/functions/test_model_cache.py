"""function-model-cache through its real run_function, with Crossplane's requirement loop.

Inputs are the example scenario examples/model-cache, changed per case; each case's whole
response is in tests/functions/responses/model_cache/.
"""

from __future__ import annotations

import copy
import pathlib

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_cache import fn
from plnt import weights, xp
from plnt_host import render
from tests.functions import tables
from tests.support import call_function, request

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


def without_storage_class() -> dict:
    xr = copy.deepcopy(CACHE.xr)
    del xr["spec"]["storageClassName"]
    return xr


def cluster_with_cache_storage_class() -> dict:
    cluster = copy.deepcopy(CACHE.required[0])
    cluster["status"]["cache"] = {"storageClassName": "plnt-shared-vast"}
    return cluster


def with_spec(field: str, value: object) -> dict:
    xr = copy.deepcopy(CACHE.xr)
    xr["spec"][field] = value
    return xr


FAILED_JOB = {
    "failed": 5,
    "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
}
PRESIGNED = "https://user:pw@example.com/m/model.gguf?X-Amz-Signature=s3cr3t#frag"
# One source per scheme: (case, uri, the downloader image, LOCATION).
SCHEMES = [
    ("s3", "s3://plnt-models/qwen3-8b/bf16", "amazon/aws-cli", "plnt-models/qwen3-8b/bf16"),
    ("gs", "gs://plnt-models/qwen3-8b", "google-cloud-cli", "plnt-models/qwen3-8b"),
    ("hf", "hf://Qwen/Qwen3-8B", "python", "Qwen/Qwen3-8B"),
    ("https", "https://example.com/m/model.gguf", "curlimages/curl", "example.com/m/model.gguf"),
]
# Invalid specs: (case, field, value, the path the failure names).
INVALID = [
    ("invalid-source", "source", {"uri": "ftp://example.com/model"}, "spec.source.uri"),
    ("invalid-size", "size", "lots", "spec.size"),
    ("invalid-cluster-name", "clusterName", "", "spec.clusterName"),
]
REQUIRED = tuple(CACHE.required)


def cache_case(name: str, xr: dict, required=REQUIRED, observed: list[dict] = ()) -> tables.Case:
    return tables.Case(name, request(xr, observed), tuple(required))


TABLE = tables.Table(
    "model_cache",
    fn.run_function,
    (
        cache_case("example", CACHE.xr, observed=CACHE.observed),
        *(cache_case(f"source-{name}", with_source(uri)) for name, uri, _, _ in SCHEMES),
        cache_case("job-succeeded", CACHE.xr, observed=job_observed({"succeeded": 1})),
        cache_case("job-failed", CACHE.xr, observed=job_observed(FAILED_JOB)),
        cache_case(
            "storage-class-from-cluster",
            without_storage_class(),
            [cluster_with_cache_storage_class()],
        ),
        cache_case("storage-class-left-out", without_storage_class()),
        cache_case("cluster-missing", CACHE.xr, []),
        cache_case(
            "cluster-without-provider-config", CACHE.xr, [{**CACHE.required[0], "status": {}}]
        ),
        *(cache_case(name, with_spec(field, value)) for name, field, value, _ in INVALID),
        cache_case("presigned-url", with_source(PRESIGNED)),
    ),
)
response = TABLE.response_named


@pytest.mark.parametrize("case", TABLE.params())
def test_response_is_whole_as_written(case: tables.Case) -> None:
    TABLE.check(case)


def test_example_composes_pvc_and_staging_job_on_the_cluster() -> None:
    rsp = response("example")
    got = manifests(rsp)
    assert set(got) == {"namespace", "pvc", "job"}
    for name in got:
        obj = xp.to_dict(rsp.desired.resources[name].resource)
        assert obj["spec"]["providerConfigRef"] == {
            "kind": "ClusterProviderConfig",
            "name": "eks-l4",
        }
    pod = got["job"]["spec"]["template"]["spec"]
    assert pod["volumes"] == [
        {"name": "weights", "persistentVolumeClaim": {"claimName": got["pvc"]["metadata"]["name"]}}
    ]
    # staging until the job succeeds; the claim is usable as soon as it exists
    assert condition(rsp).status == fnv1.STATUS_CONDITION_FALSE
    assert rsp.desired.resources["job"].ready == fnv1.READY_FALSE
    assert rsp.desired.resources["pvc"].ready == fnv1.READY_TRUE


@pytest.mark.parametrize(
    ("name", "uri", "image", "location"),
    SCHEMES,
    ids=[name for name, *_ in SCHEMES],
)
def test_a_downloader_per_scheme_reads_the_source_from_env(
    name: str, uri: str, image: str, location: str
) -> None:
    job = manifests(response(f"source-{name}"))["job"]
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
    job = manifests(response("source-hf"))["job"]
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["REVISION"] == "main"


def test_a_new_source_stages_with_a_new_job() -> None:
    first = manifests(run(with_source("s3://a/b"), CACHE.required))["job"]["metadata"]["name"]
    second = manifests(run(with_source("s3://a/c"), CACHE.required))["job"]["metadata"]["name"]
    assert first != second
    assert first.startswith("qwen3-8b-stage-")


def test_staged_when_the_job_succeeded() -> None:
    rsp = response("job-succeeded")
    assert condition(rsp).status == fnv1.STATUS_CONDITION_TRUE
    assert all(r.ready == fnv1.READY_TRUE for r in rsp.desired.resources.values())


def test_failed_job_says_so() -> None:
    rsp = response("job-failed")
    cond = condition(rsp)
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.reason == "Failed"
    assert "BackoffLimitExceeded" in cond.message


def test_storage_class_comes_from_the_cluster_or_is_left_out() -> None:
    from_cluster = manifests(response("storage-class-from-cluster"))["pvc"]["spec"]
    assert from_cluster["storageClassName"] == "plnt-shared-vast"
    assert "storageClassName" not in manifests(response("storage-class-left-out"))["pvc"]["spec"]


@pytest.mark.parametrize(
    ("name", "wants"),
    [
        ("cluster-missing", "InferenceCluster eks-l4 not found"),
        ("cluster-without-provider-config", "InferenceCluster eks-l4 has no providerConfigRef yet"),
    ],
)
def test_unreachable_cluster_composes_nothing(name: str, wants: str) -> None:
    rsp = response(name)
    assert not rsp.desired.resources
    assert wants in condition(rsp).message
    assert rsp.desired.composite.ready == fnv1.READY_FALSE


@pytest.mark.parametrize(("name", "path"), [(name, path) for name, _, _, path in INVALID])
def test_invalid_input_is_fatal(name: str, path: str) -> None:
    rsp = response(name)
    (result,) = [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert result.message.startswith(f"invalid input: {path}")


def test_a_presigned_url_never_reaches_the_conditions() -> None:
    message = condition(response("presigned-url")).message
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
