"""ModelCaches under tenancy (docs/tenancy.md, "Caches"): a cache honours its cluster's fence and
the InferenceQuotas capping cache storage, as the binder reserves it. Each case is the example
cache (examples/model-cache, 40Gi on eks-l4 in ml-team) against the fleet state a platform team
sets up; the binder's side is its real quota decision (plnt.capacity.commit.decide_quota)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.model_cache import fn
from plnt import xp
from plnt.capacity import admission, commit, ledger, quotas
from tests.functions.test_model_cache import CACHE, condition, manifests, run

GI = 1024**3
UID = "cache-uid"


def cache(size: str = "40Gi", name: str = "qwen3-8b", uid: str = UID, created: str = "t1") -> dict:
    xr = copy.deepcopy(CACHE.xr)
    xr["metadata"] |= {"name": name, "uid": uid, "creationTimestamp": created}
    xr["spec"]["size"] = size
    return xr


def fenced(admits: dict[str, str]) -> list[dict[str, Any]]:
    out = copy.deepcopy(CACHE.required)
    for o in out:
        if o["kind"] == "InferenceCluster":
            o["spec"]["namespaceSelector"] = {"matchLabels": admits}
    return out


def namespace(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "ml-team", "labels": labels or {}}}  # fmt: skip


def quota(cache_storage: str | None, devices: int = 16) -> dict[str, Any]:
    hard: dict[str, Any] = {"devices": {"gpu.nvidia.com": devices}}
    if cache_storage is not None:
        hard["cacheStorage"] = cache_storage
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceQuota",
        "metadata": {"name": "ml-team"},
        "spec": {
            "namespaceSelector": {"matchLabels": {admission.NAMESPACE_NAME_LABEL: "ml-team"}},
            "hard": hard,
        },
    }


def binder_ledger(q: dict[str, Any], caches: list[dict[str, Any]]) -> dict[str, Any]:
    """The quota ledger the binder writes for `q` given `caches` (its real decision)."""
    views = [commit.Replica.of_cache(c) for c in caches]
    decided = commit.decide_quota(
        quotas.QuotaLedger(quota=q["metadata"]["name"]),
        q,
        views,
        {"ml-team": {}},
        eligible={v.key for v in views},
    )
    return quotas.quota_ledger_configmap(decided.ledger, ledger.LEDGER_NAMESPACE)


# (case, required beyond the example, the cache, composed?, reason, words in the message)
CASES: list[tuple[str, list[dict[str, Any]], dict[str, Any], bool, str, str]] = [
    ("no fence, no quota", [], cache(), True, "", ""),
    ("a fence that admits the namespace",
     [*fenced({"team": "ml"}), namespace({"team": "ml"})], cache(), True, "", ""),
    ("a fence that excludes the namespace",
     [*fenced({"team": "research"}), namespace()], cache(), False, fn.NOT_ADMITTED,
     "cluster eks-l4 does not admit namespace ml-team"),
    ("a quota the binder reserved it in",
     [binder_ledger(quota("50Gi"), [cache()])], cache(), True, "", ""),
    ("a quota another cache filled first",
     [binder_ledger(quota("50Gi"), [cache("20Gi", "older", "u0", "t0"), cache()])], cache(),
     False, fn.INSUFFICIENT_QUOTA,
     f"namespace ml-team holds {20 * GI} of {50 * GI} bytes of cache storage (InferenceQuota "
     "ml-team)"),
    ("a 100Ti cache under a 1Ti quota",
     [binder_ledger(quota("1Ti"), [cache("100Ti")])], cache("100Ti"), False,
     fn.INSUFFICIENT_QUOTA, f"holds 0 of {1024 * GI} bytes of cache storage"),
    ("a quota not reserved yet", [binder_ledger(quota("50Gi"), [])], cache(), False,
     fn.AWAITING_RESERVATION, "awaiting its reservation of"),
    ("grown after its reservation",
     [binder_ledger(quota("50Gi"), [cache()])], cache("45Gi"), False,
     fn.AWAITING_RESERVATION, f"awaiting its reservation of {45 * GI} bytes"),
    ("a quota of devices only", [binder_ledger(quota(None), [])], cache(), True, "", ""),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "xr", "composes", "reason", "says"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_a_cache_claims_storage_only_where_fences_and_quotas_let_it(
    extra: list[dict[str, Any]], xr: dict[str, Any], composes: bool, reason: str, says: str
) -> None:
    clusters = [o for o in extra if o["kind"] == "InferenceCluster"]
    required = [*(clusters or CACHE.required), *(o for o in extra if o not in clusters)]
    rsp = run(xr, required, ())
    got = manifests(rsp)
    if composes:
        assert set(got) == {"namespace", "pvc", "job"}, condition(rsp).message
        return
    assert got == {}  # no Namespace, no PVC, no download Job on that cluster
    cond = condition(rsp)
    assert cond.status == fnv1.STATUS_CONDITION_FALSE
    assert cond.reason == reason
    assert says in cond.message, cond.message
    assert any(says in r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING)
    assert not xp.to_dict(rsp.desired.composite.resource).get("status", {}).get("pvcName")


def test_a_composed_cache_the_fence_now_excludes_keeps_its_volume_unchanged() -> None:
    """Tightening a fence (or a quota) takes nothing a cache composed: its PVC, which replicas
    mount, is kept exactly as observed, and a larger size is not applied."""
    first = run(cache(), CACHE.required, ())
    observed = []
    for name, r in first.desired.resources.items():
        obj = xp.to_dict(r.resource)
        obj["metadata"] = {"name": f"qwen3-8b-{name}",
                           "annotations": {xp.COMPOSITION_RESOURCE_NAME: name}}  # fmt: skip
        observed.append(obj)
    rsp = run(cache("80Gi"), [*fenced({"team": "research"}), namespace()], observed)
    desired = {n: xp.to_dict(r.resource)["spec"] for n, r in rsp.desired.resources.items()}
    assert desired == {
        n: xp.to_dict(r.resource)["spec"] for n, r in first.desired.resources.items()
    }
    pvc = desired["pvc"]["forProvider"]["manifest"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "40Gi"
    cond = condition(rsp)
    assert cond.reason == fn.NOT_ADMITTED and "kept as it is" in cond.message


def test_the_binder_reserves_caches_oldest_first_within_the_cap() -> None:
    caches = [cache("30Gi", "newer", "u2", "t2"), cache("30Gi", "older", "u1", "t1")]
    views = [commit.Replica.of_cache(c) for c in caches]
    decided = commit.decide_quota(
        quotas.QuotaLedger(quota="ml-team"), quota("50Gi"), views, {"ml-team": {}},
        eligible={v.key for v in views},
    )  # fmt: skip
    assert sorted(decided.ledger.entries) == ["ml-team/modelcache:older"]
    assert decided.ledger.hard[quotas.CACHE_STORAGE] == 50 * GI
    assert decided.ledger.used()[quotas.CACHE_STORAGE] == 30 * GI
    assert decided.refused["ml-team/modelcache:newer"] == (
        f"namespace ml-team holds {30 * GI} of {50 * GI} bytes of cache storage "
        "(InferenceQuota ml-team)"
    )
    # a cache never takes a replica's place: its key is none a replica can have
    assert all(quotas.CACHE_KEY_PREFIX in k for k in decided.ledger.entries)
