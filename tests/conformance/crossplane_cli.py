"""Running the real Crossplane CLI (crank) the way the conformance tests need it."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

from plnt_host import render

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED_CRDS = REPO / "third_party" / "crds"  # vendored: third_party/SOURCES
# `beta validate` always wants Crossplane's own CRDs from a package image. We seed its cache
# instead of downloading: the XRD and Composition CRDs of Crossplane v2.3.0, the version plnt
# requires (its XRDs declare a scale subresource, new in v2.3), taken from that module in the
# Go module cache by hack/install-controlplane.sh; the Function CRD from third_party/crds.
CROSSPLANE_VERSION = "v2.3.0"
CROSSPLANE_IMAGE = f"xpkg.crossplane.io/crossplane/crossplane:{CROSSPLANE_VERSION}"
MODULE_CRDS = REPO / ".tools" / "crds" / "crossplane"
CROSSPLANE_CRDS = (
    "apiextensions.crossplane.io_compositeresourcedefinitions.yaml",
    "apiextensions.crossplane.io_compositions.yaml",
    "pkg.crossplane.io_functions.yaml",
)


def run(crank: pathlib.Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(crank), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def validate_cache(root: pathlib.Path) -> pathlib.Path:
    image_dir = root / CROSSPLANE_IMAGE.replace(":", "@")
    image_dir.mkdir(parents=True, exist_ok=True)
    missing = [f for f in CROSSPLANE_CRDS if not (MODULE_CRDS / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{MODULE_CRDS} lacks {missing}: run `make test` (hack/install-controlplane.sh)"
        )
    body = "".join((MODULE_CRDS / f).read_text().rstrip() + "\n---\n" for f in CROSSPLANE_CRDS)
    (image_dir / "package.yaml").write_text(body)
    return root


def xrd_files() -> list[pathlib.Path]:
    return sorted(REPO.glob("apis/*/definition.yaml"))


def third_party_crds() -> list[pathlib.Path]:
    return sorted(p for p in SHARED_CRDS.glob("*.yaml") if p.name not in CROSSPLANE_CRDS)


def validate(
    crank: pathlib.Path,
    extensions: list[pathlib.Path],
    resources: list[dict[str, Any]] | pathlib.Path,
    workdir: pathlib.Path,
) -> subprocess.CompletedProcess:
    if isinstance(resources, list):
        path = workdir / "resources.yaml"
        path.write_text(render.dump(resources))
        resources = path
    return run(
        crank,
        "beta",
        "validate",
        ",".join(str(e) for e in extensions),
        str(resources),
        "--cache-dir",
        str(validate_cache(workdir / "cache")),
        "--crossplane-image",
        CROSSPLANE_IMAGE,
    )


def embedded_manifests(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The workload-cluster manifests inside provider-kubernetes Objects, so they validate too."""
    out = []
    for obj in objs:
        if obj.get("kind") == "Object" and obj.get("apiVersion", "").startswith("kubernetes."):
            manifest = ((obj.get("spec") or {}).get("forProvider") or {}).get("manifest")
            if isinstance(manifest, dict) and "kind" in manifest:
                out.append(manifest)
    return out
