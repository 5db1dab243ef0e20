"""Kubernetes' own validation of rendered manifests, offline (see main.go beside this file).

``build()`` compiles the validator into .tools once (``go build``; rebuilt only when its
sources change); ``validate(binary, manifests)`` runs it and returns one :class:`Verdict` per
manifest. Kinds it does not cover are left out by ``supported``: those
(LeaderWorkerSet objects as a whole, HTTPRoute, InferencePool) are checked against their CRDs
with ``crank beta validate`` instead.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
from collections.abc import Iterable
from typing import Any

import yaml

from tests.gobuild import build_cached

SOURCE = pathlib.Path(__file__).resolve().parent
SUPPORTED = frozenset(
    {
        "apps/v1/Deployment",
        "batch/v1/Job",
        "v1/Service",
        "v1/ConfigMap",
        "v1/Namespace",
        "v1/ServiceAccount",
        "v1/PersistentVolumeClaim",
        "rbac.authorization.k8s.io/v1/Role",
        "rbac.authorization.k8s.io/v1/RoleBinding",
        "resource.k8s.io/v1/ResourceClaimTemplate",
        "apiextensions.k8s.io/v1/CustomResourceDefinition",
        "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet",  # its pod templates
    }
)


@dataclasses.dataclass(frozen=True)
class Verdict:
    kind: str
    name: str
    errors: list[str]


def supported(manifest: dict[str, Any]) -> bool:
    return f"{manifest.get('apiVersion')}/{manifest.get('kind')}" in SUPPORTED


def build() -> pathlib.Path:
    """Path to an up-to-date validator; raises with Go's output when it cannot be built."""
    return build_cached(SOURCE, "k8svalidate")


def validate(binary: pathlib.Path, manifests: Iterable[dict[str, Any]]) -> list[Verdict]:
    docs = list(manifests)
    proc = subprocess.run(
        [str(binary)],
        input=yaml.safe_dump_all(docs),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"k8svalidate could not read its input: {proc.stderr}")
    verdicts = [Verdict(**json.loads(line)) for line in proc.stdout.splitlines() if line]
    if len(verdicts) != len(docs):
        raise RuntimeError(f"k8svalidate judged {len(verdicts)} of {len(docs)} manifests")
    return verdicts


def as_crd(xrd: dict[str, Any]) -> dict[str, Any]:
    """The CustomResourceDefinition an XRD's own schema becomes (Crossplane's additions aside)."""
    spec = xrd["spec"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": xrd["metadata"]["name"]},
        "spec": {
            "group": spec["group"],
            "names": {**spec["names"], "listKind": f"{spec['names']['kind']}List"},
            "scope": spec["scope"],
            "versions": [
                {
                    "name": v["name"],
                    "served": v["served"],
                    "storage": True,
                    "schema": v["schema"],
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": v.get("additionalPrinterColumns", []),
                }
                for v in spec["versions"]
            ],
        },
    }
