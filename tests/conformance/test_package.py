"""The Configuration package builds with `crossplane xpkg build`, and it lists what it needs."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tarfile
import tomllib

import yaml

from plnt_host import render, runtime
from tests.conformance import crossplane_cli

REPO = crossplane_cli.REPO


def test_configuration_package_builds_at_the_repository_root(tmp_path: pathlib.Path) -> None:
    """`make package` runs the real `crossplane xpkg build` at the repository root, the way a
    user would, not on a copied folder: every YAML file that is not part of the package (the
    reconciler's manifests, test fixtures, anything in .venv/) is ignored by name."""
    stray = REPO / "build" / "package" / "stray-test-manifest.yaml"
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n")
    try:
        proc = subprocess.run(
            [sys.executable, str(REPO / "hack/package.py"), "--dist", str(tmp_path),
             "--only", "configuration"],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
    finally:
        stray.unlink()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    version = "v" + tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    out = tmp_path / f"configuration-plnt-{version}.xpkg"

    # The package's YAML stream holds the Configuration, every XRD and Composition, nothing else.
    body = _package_yaml(out)
    kinds = [d["kind"] for d in yaml.safe_load_all(body) if d]
    assert kinds.count("Configuration") == 1
    assert kinds.count("CompositeResourceDefinition") == len(crossplane_cli.xrd_files())
    assert kinds.count("Composition") == len(list((REPO / "compositions").glob("*.yaml")))
    assert len(kinds) == 1 + kinds.count("CompositeResourceDefinition") + kinds.count("Composition")


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


REGISTRY = "xpkg.crossplane.io/plnt/"
ANNOTATIONS = (
    "meta.crossplane.io/maintainer",
    "meta.crossplane.io/source",
    "meta.crossplane.io/license",
)


def test_every_function_is_packaged_and_depended_on() -> None:
    config = yaml.safe_load((REPO / "crossplane.yaml").read_text())
    assert config["apiVersion"] == "meta.pkg.crossplane.io/v1"
    # ModelDeployment's scale subresource needs Crossplane v2.3.
    assert config["spec"]["crossplane"]["version"] == ">=v2.3.0"
    # Crossplane v2's dependency form; the function:/provider: keys are deprecated.
    deps = config["spec"]["dependsOn"]
    for dep in deps:
        assert set(dep) == {"apiVersion", "kind", "package", "version"}, dep
        assert dep["apiVersion"] == "pkg.crossplane.io/v1", dep
        assert ":" not in dep["package"].rsplit("/", 1)[-1], "the version is not in the package"
        assert dep["version"].startswith("v"), f"{dep['package']} is pinned"
    by_package = {d["package"]: d for d in deps}
    names = runtime.function_names()
    expected_annotations = {k: config["metadata"]["annotations"][k] for k in ANNOTATIONS}
    for name in names:
        dep = by_package.get(f"{REGISTRY}{name}")
        assert dep, f"crossplane.yaml lacks {name}"
        assert dep["kind"] == "Function"
        meta = yaml.safe_load((REPO / "package" / name / "crossplane.yaml").read_text())
        assert (meta["apiVersion"], meta["kind"]) == ("meta.pkg.crossplane.io/v1", "Function")
        assert meta["metadata"]["name"] == name
        assert meta["spec"]["capabilities"] == ["composition"]
        annotations = meta["metadata"]["annotations"]
        assert {k: annotations.get(k) for k in ANNOTATIONS} == expected_annotations, name
        docker = (REPO / "package" / name / "Dockerfile").read_text()
        assert f"FROM {REGISTRY}function-base:" in docker
        # Crossplane mounts the certificates at /tls/server and says so in
        # TLS_SERVER_CERTS_DIR, which `plnt function` reads: the image names no directory.
        assert docker.rstrip().endswith(f'CMD ["{name}"]'), docker
    base = (REPO / "package" / "Dockerfile.base").read_text()
    assert 'ENTRYPOINT ["plnt", "function"]' in base
    assert "reconciler]" not in base, "function images leave the Kubernetes client out"
    providers = [d for d in deps if d["kind"] == "Provider"]
    for provider in ("provider-kubernetes", "provider-helm", "provider-coreweave"):
        assert any(d["package"].endswith(provider) for d in providers), provider

    # One registry path for every plnt package: functions, Configuration, reconciler.
    install = (REPO / "crossplane.yaml").read_text()
    assert f"{REGISTRY}{config['metadata']['name']}:" in install
    # The reconciler is a Provider package the Configuration depends on, run with
    # package/install/settings.yaml (through the ImageConfig that matches its package).
    reconciler = by_package[f"{REGISTRY}plnt-reconciler"]
    assert (reconciler["kind"], reconciler["version"]) == ("Provider", config_version(config))
    meta = yaml.safe_load((REPO / "package/plnt-reconciler/crossplane.yaml").read_text())
    assert (meta["apiVersion"], meta["kind"]) == ("meta.pkg.crossplane.io/v1", "Provider")
    assert meta["metadata"]["name"] == "plnt-reconciler"
    annotations = meta["metadata"]["annotations"]
    assert {k: annotations.get(k) for k in ANNOTATIONS} == expected_annotations
    image_config, runtime_config = _runtime_for(reconciler)
    assert image_config["spec"]["matchImages"] == [
        {"type": "Prefix", "prefix": f"{REGISTRY}plnt-reconciler"}
    ]
    assert runtime_config["metadata"]["name"] == "plnt-reconciler"  # settings.yaml's
    assert _runtime_container(runtime_config)["args"][:2] == ["reconcile", "--bind"]

    # provider-kubernetes runs with the watches and poll docs/sizing.md recommends, selected by
    # the exact package crossplane.yaml depends on
    (kubernetes,) = [d for d in providers if d["package"].endswith("/provider-kubernetes")]
    image_config, runtime_config = _runtime_for(kubernetes)
    assert image_config["spec"]["matchImages"] == [
        {"type": "Prefix", "prefix": kubernetes["package"]}
    ]
    assert _runtime_container(runtime_config)["args"] == ["--enable-watches", "--poll=1m"]

    # every runtime config of the folder is one an ImageConfig of it selects, and no other
    docs = _install_docs()
    selected = [
        d["spec"]["runtime"]["configRef"]["name"] for d in docs if d["kind"] == "ImageConfig"
    ]
    configs = [d["metadata"]["name"] for d in docs if d["kind"] == "DeploymentRuntimeConfig"]
    assert sorted(selected) == sorted(configs) and len(set(configs)) == len(configs) == 2

    # Compositions only reference functions this distribution serves.
    for composition in render.compositions().values():
        for step in composition["spec"]["pipeline"]:
            ref = step["functionRef"]["name"]
            assert ref.startswith(runtime.INSTALLED_PREFIX)
            assert ref.removeprefix(runtime.INSTALLED_PREFIX) in names, ref


def config_version(config: dict) -> str:
    """The version every plnt package is pinned at (the functions')."""
    (version,) = {d["version"] for d in config["spec"]["dependsOn"] if d["kind"] == "Function"}
    return version


def _runtime_for(dependency: dict) -> tuple[dict, dict]:
    """The ImageConfig of package/install that Crossplane applies for its runtime to the image
    of ``dependency`` (crossplane.yaml's: package and version), the longest matching prefix as
    Crossplane chooses, and the DeploymentRuntimeConfig it names, in package/install too."""
    docs = _install_docs()
    package, image = dependency["package"], f"{dependency['package']}:{dependency['version']}"
    matching = [
        (len(m["prefix"]), d)
        for d in docs
        if d["kind"] == "ImageConfig" and (d["spec"].get("runtime") or {}).get("configRef")
        for m in d["spec"]["matchImages"]
        if m["type"] == "Prefix" and image.startswith(m["prefix"])
    ]
    assert matching, f"no ImageConfig in package/install selects a runtime for {package}"
    longest = max(n for n, _ in matching)
    (image_config,) = [d for n, d in matching if n == longest]
    name = image_config["spec"]["runtime"]["configRef"]["name"]
    (runtime_config,) = [
        d for d in docs if d["kind"] == "DeploymentRuntimeConfig" and d["metadata"]["name"] == name
    ]
    return image_config, runtime_config


def _runtime_container(runtime_config: dict) -> dict:
    """The one container a DeploymentRuntimeConfig sets: the one Crossplane's runtime runs the
    package's image in, which it names package-runtime."""
    template = runtime_config["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]
    (container,) = template["containers"]
    assert container["name"] == "package-runtime"
    return container


def _install_docs() -> list[dict]:
    return [
        d
        for path in sorted((REPO / "package/install").glob("*.yaml"))
        for d in render.load_yaml_docs(path)
    ]


def test_install_folder_holds_what_plnt_needs_but_does_not_compose() -> None:
    """package/install (applied once, before the Configuration) holds the Gateway ModelService
    routes through by default and Crossplane's RBAC for the plain kinds it composes on the
    control plane (anything that is neither a provider's kind nor plnt's own XR)."""
    docs = _install_docs()
    (gateway,) = [d for d in docs if d["kind"] == "Gateway"]
    out = render.render(render.load_scenario(REPO / "examples/model-service"), tree=True)
    routes = [o for node in out.tree() for o in node.composed if o["kind"] == "HTTPRoute"]
    assert routes
    for route in routes:
        (parent,) = route["spec"]["parentRefs"]
        assert (parent["namespace"], parent["name"]) == (
            gateway["metadata"]["namespace"],
            gateway["metadata"]["name"],
        )
    assert gateway["spec"]["listeners"][0]["allowedRoutes"]["namespaces"]["from"] == "All"
    # the Namespace comes before anything in it, as `kubectl apply -f package/install/` applies
    kinds = [(d["kind"], d["metadata"].get("namespace")) for d in docs]
    first_namespaced = min(i for i, (_, ns) in enumerate(kinds) if ns == "plnt-system")
    assert ("Namespace", None) in kinds[:first_namespaced], kinds

    (role,) = [d for d in docs if d["metadata"]["name"] == "crossplane:plnt:composed-resources"]
    assert role["metadata"]["labels"]["rbac.crossplane.io/aggregate-to-crossplane"] == "true"
    granted = {
        (g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    plnt_groups = {k[0].split("/")[0] for k in render.compositions()}
    # Crossplane's own ClusterRole already grants core Services; providers' kinds come with them.
    for folder in render.scenario_folders(REPO / "examples"):
        for node in render.render(render.load_scenario(folder), tree=True).tree():
            for obj in node.composed:
                group = obj["apiVersion"].rpartition("/")[0]
                if group in plnt_groups or group.endswith(".crossplane.io") or group == "":
                    continue
                assert (group, _plural(obj["kind"])) in granted, (
                    f"{folder.name}: {obj['kind']} ({group})"
                )
    # what functions read through Crossplane beyond its own ClusterRole
    for group, plural in [("", "namespaces"), ("gateway.networking.k8s.io", "gateways")]:
        assert (group, plural) in granted, plural

    # the reconciler's ServiceAccount, as settings.yaml names it, is what the roles bind
    (runtime_config,) = [
        d
        for d in docs
        if d["kind"] == "DeploymentRuntimeConfig" and d["metadata"]["name"] == "plnt-reconciler"
    ]
    account = runtime_config["spec"]["serviceAccountTemplate"]["metadata"]["name"]
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert len(bindings) == 3
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": "crossplane-system"}
        ], binding["metadata"]["name"]


def _plural(kind: str) -> str:
    """The resource name the API server uses for these kinds (Kubernetes' own rule of thumb)."""
    lower = kind.lower()
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + ("es" if lower.endswith("s") else "s")
