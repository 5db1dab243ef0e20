"""package/rbac/tenancy-roles.yaml on a real kube-apiserver (RBAC on), bound as
docs/tenancy.md says: each role may do what the page promises and nothing it withholds, asked
of the API server's own authorizer (SubjectAccessReview)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.reconcile.apiserver import REPO

ROLES = REPO / "package" / "rbac" / "tenancy-roles.yaml"
PLATFORM, TEAM = "platform-team", "team-a"


def _binding(kind: str, role: str, group: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{role}-{group}"}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": group}],
    }


@pytest.fixture(scope="module")
def bound(kube_apiserver):
    api = kube_apiserver.admin
    for ns in ("plnt-system", TEAM):
        r = api.post("/api/v1/namespaces", json={"metadata": {"name": ns}})
        assert r.status_code in (201, 409), r.text
    docs = [
        *yaml.safe_load_all(ROLES.read_text()),
        _binding("ClusterRoleBinding", "plnt-platform-admin", PLATFORM),
        _binding("RoleBinding", "plnt-system-reader", PLATFORM, "plnt-system"),
        _binding("RoleBinding", "plnt-ml-team", TEAM, TEAM),
    ]
    for doc in docs:
        kind = doc["kind"]
        plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
                  "RoleBinding": "rolebindings"}[kind]  # fmt: skip
        ns = doc["metadata"].get("namespace")
        path = f"/apis/rbac.authorization.k8s.io/v1/{f'namespaces/{ns}/' if ns else ''}{plural}"
        r = api.post(path, json=doc)
        assert r.status_code in (201, 409), r.text
    return api


def allowed(api, group: str, verb: str, resource: str, namespace: str, api_group: str = "") -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"someone-of-{group}",
            "groups": [group, "system:authenticated"],
            "resourceAttributes": {
                "namespace": namespace, "verb": verb, "group": api_group, "resource": resource,
            },
        },
    }  # fmt: skip
    r = api.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=review)
    assert r.status_code == 201, r.text
    return bool(r.json()["status"].get("allowed"))


CASES = [
    # (who, verb, resource, namespace, api group, allowed)
    (PLATFORM, "get", "configmaps", "plnt-system", "", True),  # the comment's promise
    (PLATFORM, "list", "configmaps", "plnt-system", "", True),
    (PLATFORM, "watch", "configmaps", "plnt-system", "", True),
    (PLATFORM, "update", "configmaps", "plnt-system", "", False),  # only the binder writes
    (PLATFORM, "patch", "configmaps", "plnt-system", "", False),
    (PLATFORM, "delete", "configmaps", "plnt-system", "", False),
    (PLATFORM, "create", "configmaps", "plnt-system", "", False),
    (PLATFORM, "get", "configmaps", TEAM, "", False),  # plnt-system only
    (PLATFORM, "get", "secrets", "plnt-system", "", False),
    (PLATFORM, "create", "inferencequotas", "", "modelplane.ai", True),
    (PLATFORM, "list", "modeldeployments", TEAM, "modelplane.ai", True),
    (PLATFORM, "create", "modeldeployments", TEAM, "modelplane.ai", False),
    (TEAM, "create", "modelcaches", TEAM, "modelplane.ai", True),
    (TEAM, "create", "modelcaches", "plnt-system", "modelplane.ai", False),
    (TEAM, "create", "modelreplicas", TEAM, "modelplane.ai", False),
    (TEAM, "get", "configmaps", "plnt-system", "", False),
    (TEAM, "create", "inferencequotas", "", "modelplane.ai", False),
]


@pytest.mark.parametrize(
    ("who", "verb", "resource", "namespace", "api_group", "expected"),
    CASES,
    ids=[f"{c[0]} {c[1]} {c[2]} in {c[3] or 'cluster'}" for c in CASES],
)
def test_each_role_grants_what_docs_tenancy_says(
    bound, who: str, verb: str, resource: str, namespace: str, api_group: str, expected: bool
) -> None:
    assert allowed(bound, who, verb, resource, namespace, api_group) is expected
