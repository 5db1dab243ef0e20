"""The Configuration package builds with `crossplane xpkg build`, and it lists what it needs."""

from __future__ import annotations

import pathlib
import shutil
import tarfile

import yaml

from plnt import render, runtime
from tests.conformance import crossplane_cli

REPO = crossplane_cli.REPO


def test_configuration_package_builds(crank: pathlib.Path, tmp_path: pathlib.Path) -> None:
    root = tmp_path / "package"
    root.mkdir()
    shutil.copy(REPO / "crossplane.yaml", root)
    shutil.copytree(REPO / "apis", root / "apis")
    shutil.copytree(REPO / "compositions", root / "compositions")
    out = tmp_path / "plnt.xpkg"
    proc = crossplane_cli.run(
        crank,
        "xpkg",
        "build",
        "--package-root",
        str(root),
        "--examples-root",
        str(REPO / "examples"),
        "--package-file",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.stat().st_size > 0

    # The package's YAML stream holds every XRD and Composition.
    body = _package_yaml(out)
    kinds = [d["kind"] for d in yaml.safe_load_all(body) if d]
    assert kinds.count("CompositeResourceDefinition") == len(crossplane_cli.xrd_files())
    assert kinds.count("Composition") == len(list((REPO / "compositions").glob("*.yaml")))


def _package_yaml(xpkg: pathlib.Path) -> str:
    with tarfile.open(xpkg) as image:
        for member in image.getmembers():
            if not member.isfile():
                continue
            blob = image.extractfile(member).read()
            if blob[:2] == b"\x1f\x8b":
                import gzip
                import io

                try:
                    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as layer:
                        for f in layer.getmembers():
                            if f.name.endswith("package.yaml"):
                                return layer.extractfile(f).read().decode()
                except (OSError, tarfile.TarError):
                    continue
    raise AssertionError("no package.yaml layer in the built package")


def test_every_function_is_packaged_and_depended_on() -> None:
    config = yaml.safe_load((REPO / "crossplane.yaml").read_text())
    assert config["apiVersion"] == "meta.pkg.crossplane.io/v1"
    assert config["spec"]["crossplane"]["version"].startswith(">=v2")
    deps = {d.get("function", d.get("provider")): d["version"] for d in config["spec"]["dependsOn"]}
    names = runtime.function_names()
    for name in names:
        assert deps.get(f"xpkg.crossplane.io/plnt/{name}"), f"crossplane.yaml lacks {name}"
        meta = yaml.safe_load((REPO / "package" / name / "crossplane.yaml").read_text())
        assert (meta["apiVersion"], meta["kind"]) == ("meta.pkg.crossplane.io/v1beta1", "Function")
        assert meta["metadata"]["name"] == name
        docker = (REPO / "package" / name / "Dockerfile").read_text()
        assert "FROM plnt/function-base:" in docker
        assert f'CMD ["{name}", "--tls-certs-dir", "/tls"]' in docker
    base = (REPO / "package" / "Dockerfile.base").read_text()
    assert 'ENTRYPOINT ["plnt", "function"]' in base
    for provider in ("provider-kubernetes", "provider-helm", "provider-coreweave"):
        assert any(k.endswith(provider) for k in deps), provider
    assert all(v.startswith("v") for v in deps.values()), "every dependency is pinned"

    # Compositions only reference functions this distribution serves.
    for composition in render.compositions().values():
        for step in composition["spec"]["pipeline"]:
            ref = step["functionRef"]["name"]
            assert ref.startswith(runtime.INSTALLED_PREFIX)
            assert ref.removeprefix(runtime.INSTALLED_PREFIX) in names, ref
