"""Crossplane's package manager installs plnt from a loopback registry, and an XR composes
through the installed functions (tests/e2e/packages.py says how each piece stands in).

A control plane of its own (a bare ControlPlane: Crossplane core, nothing of plnt installed),
so what is installed here comes from the packages only: the XRDs and Compositions out of the
Configuration, the Functions and Providers out of its dependencies, the Lock filled by the
dependency manager. The providers are stand-ins (their CRDs, no controller): provider-kubernetes
with its own CRDs (built from v1.2.0, pushed as the v1.0.0 crossplane.yaml pins), provider-helm
and provider-coreweave with schemaless ones. The runtime stand-in runs function-inference-class
from the image the package manager resolved (pulled from the registry, run under runc with the
Secret's certificates at /tls/server) and the other functions as local processes.
"""

from __future__ import annotations

import pathlib
import time

import pytest

from tests.e2e import kube, live, packages, stack

API = "modelplane.ai/v1alpha1"
FROM_IMAGE = "function-inference-class"
CLASS = "plnt-e2e-l40s-4x"


@pytest.fixture(scope="module")
def installed(e2e_dir):
    gaps = stack.missing() + packages.missing()
    if gaps:
        pytest.fail("the package-install test needs " + ", ".join(gaps) + ": run `make test`")
    workdir = e2e_dir("packages")
    built = packages.build_packages()
    plane = stack.ControlPlane(workdir, bare=True)
    install = None
    try:
        install = packages.Install(plane, from_images=(FROM_IMAGE,))
        install.publish(built)
        install.configure_registry()
        install.runtime.start()
        started = time.monotonic()
        install.apply_configuration()
        install.wait_installed()
        install.install_seconds = time.monotonic() - started
        (workdir / "logs" / "install-seconds").write_text(f"{install.install_seconds:.1f}\n")
        yield install
    finally:
        if install is not None:
            install.stop()
        plane.close()


def test_configuration_and_functions_installed_and_healthy(installed) -> None:
    mgmt = installed.plane.mgmt
    config = packages.configuration()
    conf = mgmt.get(packages.PKG, "Configuration", config["metadata"]["name"])
    assert packages.healthy(conf), conf["status"]
    registry = installed.registry.host
    for dep in packages.dependencies():
        name = packages.installed_name(dep["package"])
        obj = mgmt.get(packages.PKG, dep["kind"], name)
        assert obj is not None, f"the package manager made no {dep['kind']} {name}"
        assert packages.healthy(obj), (name, obj["status"])
        assert obj["spec"]["package"] == f"{dep['package']}:{dep['version']}"
        (revision,) = [
            r
            for r in mgmt.list(packages.PKG, f"{dep['kind']}Revision")
            if r["metadata"]["labels"].get("pkg.crossplane.io/package") == name
        ]
        # pulled from the loopback registry through the ImageConfig, under the public name
        resolved = revision["status"]["resolvedImage"]
        assert (
            resolved
            == f"{registry}/{dep['package'].removeprefix('xpkg.crossplane.io/')}:"
            + (dep["version"])
        )
        refs = revision["status"].get("appliedImageConfigRefs") or []
        assert {"name": packages.IMAGE_CONFIG, "reason": "RewriteImage"} in refs, refs
        if dep["kind"] == "Function":
            assert revision["status"]["endpoint"] == installed.runtime.endpoints[name]
            assert "composition" in (revision["status"].get("capabilities") or [])
    functions = {f["metadata"]["name"] for f in mgmt.list(packages.PKG, "Function")}
    # what the Compositions' functionRefs name
    assert functions == {f"plnt-{f}" for f in stack.runtime.function_names()}


def test_lock_lists_the_configuration_and_every_dependency(installed) -> None:
    lock = installed.plane.mgmt.get("pkg.crossplane.io/v1beta1", "Lock", "lock")
    entries = {p["source"]: p for p in lock.get("packages") or []}
    config = packages.configuration()
    source = f"xpkg.crossplane.io/plnt/{config['metadata']['name']}"
    assert source in entries, sorted(entries)
    assert (entries[source]["apiVersion"], entries[source]["kind"]) == (
        packages.PKG,
        "Configuration",
    )
    assert entries[source]["version"] == "v0.1.0"
    wanted = {(d["kind"], d["package"], d["version"]) for d in packages.dependencies()}
    listed = {(d["kind"], d["package"], d["constraints"]) for d in entries[source]["dependencies"]}
    assert listed == wanted
    for kind, package, version in wanted:
        entry = entries.get(package)
        assert entry is not None, f"{package} is not in the Lock: {sorted(entries)}"
        assert (entry["kind"], entry["version"]) == (kind, version)
        # the name of the package Crossplane made for it
        assert entry["name"].startswith(packages.installed_name(package) + "-")
    assert len(entries) == len(wanted) + 1


def test_xrds_and_compositions_come_from_the_configuration(installed) -> None:
    """Every XRD and Composition in apis/ and compositions/, controlled by the Configuration's
    current revision: nothing here was applied with kubectl."""
    mgmt = installed.plane.mgmt
    name = packages.configuration()["metadata"]["name"]
    current = mgmt.get(packages.PKG, "Configuration", name)["status"]["currentRevision"]
    expected = [
        ("apiextensions.crossplane.io/v2", "CompositeResourceDefinition", doc["metadata"]["name"])
        for path in sorted((packages.REPO / "apis").glob("*/definition.yaml"))
        for doc in kube.load_yaml(path)
    ] + [
        ("apiextensions.crossplane.io/v1", "Composition", doc["metadata"]["name"])
        for path in sorted((packages.REPO / "compositions").glob("*.yaml"))
        for doc in kube.load_yaml(path)
    ]
    assert len(expected) > 10
    for api_version, kind, obj_name in expected:
        obj = mgmt.get(api_version, kind, obj_name)
        assert obj is not None, f"{kind} {obj_name} was not installed"
        (controller,) = [o for o in obj["metadata"]["ownerReferences"] if o.get("controller")]
        assert (controller["kind"], controller["name"]) == ("ConfigurationRevision", current)
        if kind == "CompositeResourceDefinition":
            assert live.is_true(obj, "Established"), (obj_name, obj["status"])


def test_xr_composes_through_the_function_run_from_its_image(installed) -> None:
    plane = installed.plane
    plane.mgmt.apply(
        {
            "apiVersion": API,
            "kind": "InferenceClass",
            "metadata": {"name": CLASS},
            "spec": {
                "description": "4x NVIDIA L40S 48GB per node",
                "devices": [
                    {
                        "name": "gpu",
                        "claim": "DRA",
                        "driver": "gpu.nvidia.com",
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 4,
                        "attributes": {"productName": {"string": "NVIDIA L40S"}},
                        "capacity": {"memory": {"value": "46068Mi"}},
                    }
                ],
            },
        }
    )
    xr = live.wait_object(
        plane.mgmt,
        API,
        "InferenceClass",
        CLASS,
        until=lambda o: live.is_true(o, "Usable"),
        seconds=120,
        what=f"InferenceClass {CLASS} Usable",
    )
    status = xr["status"]
    assert status["gpu"] is True
    assert status["devices"] == [
        {
            "name": "gpu",
            "claim": "DRA",
            "count": 4,
            "driver": "gpu.nvidia.com",
            "deviceClassName": "gpu.nvidia.com",
        }
    ]
    assert live.condition(xr, "Usable")["message"] == (
        "4x gpu per node; not provisionable (Existing clusters only)"
    )
    assert live.is_true(xr, "Synced"), live.condition(xr, "Synced")

    # The function that composed it runs from the image Crossplane resolved, under runc.
    fn = f"plnt-{FROM_IMAGE}"
    assert installed.runtime.started_from[fn] == (
        f"{installed.registry.host}/plnt/{FROM_IMAGE}:v0.1.0"
    )
    container = plane.images.running[fn].running
    pid = container.pid()
    uid = next(
        line.split()[1]
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("Uid:")
    )
    assert uid == "2000"
    root = pathlib.Path(f"/proc/{pid}/root")
    assert (root / "tls" / "server" / "tls.crt").read_bytes() == (
        plane.dir / "runtime" / fn / "tls-server" / "tls.crt"
    ).read_bytes()
