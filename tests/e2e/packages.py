"""plnt installed by Crossplane's own package manager, from an OCI registry on loopback.

The pieces, all inside the e2e network namespace of a bare ControlPlane (Crossplane core with
`--package-runtime=External` and nothing of plnt installed):

- the packages `make package` builds (hack/package.py: the Configuration and one .xpkg per
  function, each embedding its runtime image), into build/e2e-dist (cached like `make package`);
- a registry: go-containerregistry's `crane registry serve` (.tools/bin/crane,
  hack/install-crane.sh) on 127.0.0.1 (plain HTTP: go-containerregistry, and so Crossplane,
  speaks HTTP to a registry on 127.0.0.1), every package pushed with the real `crank xpkg push`
  under the path `crossplane.yaml` names, minus the registry host;
- stand-in provider packages: provider-kubernetes, provider-helm and provider-coreweave cannot
  run here, so each is a `crank xpkg build` of a Provider metadata file and CRDs (provider-
  kubernetes' real CRDs, from .tools/crds, built from its module at v1.2.0; the other two
  schemaless CRDs for the kinds plnt composes), pushed under the name and version
  `crossplane.yaml` depends on. They carry no runtime image and nothing runs them: they are
  there so the dependency resolver finds what the Configuration needs;
- an ImageConfig rewriting the `xpkg.crossplane.io/` prefix to the loopback registry, so the
  Configuration, its Functions and Providers are pulled from it under their public names;
- a package runtime stand-in (`PackageRuntime`, a thread): what Crossplane's Deployment runtime
  does and `--package-runtime=External` leaves to someone else. For each active Function and
  Provider revision it creates the server TLS Secret the revision names (certificates the test
  CA signs) in crossplane-system and sets `status.tlsServerSecretName`; for a function it starts
  the server, from the image the package manager resolved (pulled from the registry with
  `crane pull`, run under runc by tests/e2e/images.py) or as a local `plnt function` process,
  with that Secret's certificates, and sets `status.endpoint` (a new revision, an upgrade's, gets
  the old server's address at once, as Crossplane's per-package Service keeps reaching the old
  pod while the Deployment rolls, and its own once its server is ready; then the old one
  stops); for plnt's own provider (the
  reconciler) it does what Crossplane v2.3's Deployment runtime does with a ProviderRevision:
  picks the DeploymentRuntimeConfig (the ImageConfig whose prefix matches the resolved image
  longest, else the revision's runtimeConfigRef), creates the ServiceAccount it names and the
  Deployment object, and runs the image's entrypoint with the runtime config's arguments under
  runc as the pod user, with a token of that ServiceAccount (TokenRequest) and the API server's
  CA where in-cluster clients read them and nothing else to authenticate with; then
  `RuntimeHealthy=True`. provider-kubernetes, the one other provider that can run here, gets
  the same ServiceAccount and Deployment from its runtime config, and its controller runs as a
  local process with that config's container arguments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import httpx
import yaml

from plnt_host import procs as plnt_procs
from tests.e2e import images, kube, live
from tests.e2e.stack import (
    CROSSPLANE_NAMESPACE,
    TOOL_CRDS,
    ControlPlane,
    _now,
    install_docs,
)
from tests.images import oci
from tests.reconcile.apiserver import REPO, TOOLS, free_port

CRANE = TOOLS / "crane"
CRANK = TOOLS / "crank"
PUBLIC_REGISTRY = "xpkg.crossplane.io/"  # where crossplane.yaml says every package lives
PLNT_REGISTRY = PUBLIC_REGISTRY + "plnt/"
# What Crossplane's Deployment runtime sets up for a provider's pod (v2.3: its ProviderHooks and
# DeploymentRuntimeBuilder): the container it configures, the pod user, and where a
# ServiceAccount's token is mounted for in-cluster clients.
RUNTIME_CONTAINER = "package-runtime"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_SECONDS = 24 * 3600
LOCAL_PROVIDER = "provider-kubernetes"  # the process name the stack gives it
RECONCILER_IMAGE_CONFIG = "plnt-reconciler"  # package/install/package-runtime.yaml's
PKG = "pkg.crossplane.io/v1"
IMAGE_CONFIG = "plnt-e2e-loopback-registry"
DIST = REPO / "build" / "e2e-dist"
# From applying the Configuration to it and all its dependencies Installed and Healthy took 25-32 s
# on 2 cores beside the shared stack; one deadline bounds the whole install at a few times that.
INSTALL_SECONDS = 180
# One `crank xpkg build` or `push` to the loopback registry takes seconds (a function package
# embeds a 68 MiB image).
CRANK_SECONDS = 120

# The kinds plnt composes from the providers that cannot run here: their stand-ins' CRDs,
# schemaless (x-kubernetes-preserve-unknown-fields). (group, version, kind, plural, scope)
SCHEMALESS = {
    "provider-helm": [
        ("helm.m.crossplane.io", "v1beta1", "Release", "releases", "Namespaced"),
        ("helm.m.crossplane.io", "v1beta1", "ProviderConfig", "providerconfigs", "Namespaced"),
        (
            "helm.m.crossplane.io",
            "v1beta1",
            "ClusterProviderConfig",
            "clusterproviderconfigs",
            "Cluster",
        ),
    ],
    "provider-coreweave": [
        ("cks.coreweave.m.crossplane.io", "v1alpha1", "Cluster", "clusters", "Namespaced"),
        ("networking.coreweave.m.crossplane.io", "v1alpha1", "VPC", "vpcs", "Namespaced"),
        (
            "coreweave.m.crossplane.io",
            "v1beta1",
            "ClusterProviderConfig",
            "clusterproviderconfigs",
            "Cluster",
        ),
    ],
}


def missing() -> list[str]:
    return [str(b) for b in (CRANE, CRANK) if not b.is_file()]


# --- what crossplane.yaml depends on -----------------------------------------------------------


def configuration() -> dict[str, Any]:
    return yaml.safe_load((REPO / "crossplane.yaml").read_text())


def dependencies() -> list[dict[str, str]]:
    """crossplane.yaml's dependsOn: apiVersion, kind, package, version."""
    return configuration()["spec"]["dependsOn"]


def is_plnt(package: str) -> bool:
    """Whether a package (an image reference or repository) is one plnt builds."""
    return package.startswith(PLNT_REGISTRY)


def installed_name(package: str) -> str:
    """The name Crossplane gives a dependency: its repository path as a DNS label
    (xpkg.crossplane.io/plnt/function-x -> plnt-function-x)."""
    return package.split("/", 1)[1].replace("/", "-")


def build_packages(dist: pathlib.Path = DIST, only: Iterable[str] = ()) -> dict[str, pathlib.Path]:
    """The Configuration and every function's .xpkg (or only the named ones), by hack/package.py
    (as `make package`, cached); returns {package name: file}."""
    names = list(only) or ["configuration", "reconciler"] + [
        d["package"].rsplit("/", 1)[1] for d in dependencies() if d["kind"] == "Function"
    ]
    # a report of this call's own: the package-install test and the shared stack (on two
    # workers) build into the same folder, one after the other (hack/package.py locks)
    report = dist / f"report-{os.getpid()}.json"
    argv = [sys.executable, str(REPO / "hack" / "package.py"), "--dist", str(dist)]
    argv += [a for n in names for a in ("--only", n)] + ["--report", str(report)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"hack/package.py failed:\n{proc.stdout}{proc.stderr}")
    out = {}
    artifacts = json.loads(report.read_text())["artifacts"]
    report.unlink()
    for artifact in artifacts:
        path = pathlib.Path(artifact)
        out[path.name.rsplit("-v", 1)[0]] = path
    return out


def build_second(
    version: str, dist: pathlib.Path, edits: Mapping[str, tuple[str, str]] = MappingProxyType({})
) -> dict[str, pathlib.Path]:
    """A second build of every plnt package, at ``version``: the working tree copied, its
    pyproject.toml and crossplane.yaml set to that version (so every plnt image differs from the
    first build's: the plnt layer carries the version) and ``edits`` made to it ({file relative
    to the repository: (text, replacement)}, each text found exactly once: a changed function),
    built by the copy's hack/package.py exactly as `make package` builds. The dependencies'
    wheels are the first build's (the same pins), so only plnt's own layers, images and packages
    are new. Returns {name: file}."""
    src = dist.parent / f"source-{version}"
    shutil.rmtree(src, ignore_errors=True)
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO, capture_output=True, check=True, timeout=60,
    ).stdout.decode().split("\0")  # fmt: skip
    for rel in filter(None, listed):
        source = REPO / rel
        if source.is_file():  # a file deleted in the working tree is still listed
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, src / rel)
    for link in (".venv", ".tools"):
        (src / link).symlink_to((REPO / link).resolve())
    # its build cache outlives the copy (a rerun rebuilds nothing unchanged), beside the first
    # build's, whose wheels it shares
    cache = REPO / "build" / f"package-{version}"
    cache.mkdir(parents=True, exist_ok=True)
    (src / "build").mkdir()
    (src / "build" / "package").symlink_to(cache)
    for wheels in (REPO / "build" / "package").glob("wheels-*"):
        if not (cache / wheels.name).exists():
            (cache / wheels.name).symlink_to(wheels)
    for rel, (text, replacement) in edits.items():
        source = (src / rel).read_text()
        assert source.count(text) == 1, f"{rel} holds {text!r} {source.count(text)} times"
        (src / rel).write_text(source.replace(text, replacement))
    pyproject = (src / "pyproject.toml").read_text()
    old = f'version = "{_project_version()}"'
    assert old in pyproject, "pyproject.toml names no project version"
    (src / "pyproject.toml").write_text(pyproject.replace(old, f'version = "{version[1:]}"', 1))
    config = configuration()
    for dep in config["spec"]["dependsOn"]:
        if is_plnt(dep["package"]):
            dep["version"] = version
    (src / "crossplane.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    report = dist / f"report-{os.getpid()}.json"
    dist.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(src / "hack" / "package.py"), "--dist", str(dist)]
    proc = subprocess.run(
        [*argv, "--report", str(report)],
        cwd=src, capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"the second build failed:\n{proc.stdout}{proc.stderr}")
    artifacts = json.loads(report.read_text())["artifacts"]
    report.unlink()
    return {pathlib.Path(a).name.rsplit("-v", 1)[0]: pathlib.Path(a) for a in artifacts}


def stand_in_provider(package: str, version: str, workdir: pathlib.Path) -> pathlib.Path:
    """A Provider package with no runtime: metadata plus CRDs, built by the real CLI."""
    name = package.rsplit("/", 1)[1]
    root = workdir / "providers" / name
    root.mkdir(parents=True, exist_ok=True)
    meta = {
        "apiVersion": "meta.pkg.crossplane.io/v1",
        "kind": "Provider",
        "metadata": {
            "name": name,
            "annotations": {
                "meta.crossplane.io/description": f"plnt e2e stand-in for {package}:{version}: "
                "its CRDs only, no runtime image"
            },
        },
    }
    (root / "crossplane.yaml").write_text(yaml.safe_dump(meta))
    crds = root / "crds"
    crds.mkdir(exist_ok=True)
    if name == "provider-kubernetes":
        for path in sorted((TOOL_CRDS / "provider-kubernetes").glob("*.yaml")):
            (crds / path.name).write_bytes(path.read_bytes())
    else:
        for group, ver, kind, plural, scope in SCHEMALESS[name]:
            (crds / f"{group}_{plural}.yaml").write_text(
                yaml.safe_dump(_schemaless_crd(group, ver, kind, plural, scope))
            )
    out = workdir / "providers" / f"{name}-{version}.xpkg"
    empty = workdir / "providers" / "no-examples"
    empty.mkdir(exist_ok=True)
    _run(
        CRANK, "xpkg", "build", "--package-root", root, "--examples-root", empty,
        "--package-file", out,
    )  # fmt: skip
    return out


def _schemaless_crd(group: str, version: str, kind: str, plural: str, scope: str) -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "listKind": f"{kind}List"},
            "scope": scope,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


# --- the registry ----------------------------------------------------------------------------


class Registry:
    """`crane registry serve` on 127.0.0.1 inside the stack's namespace, blobs on disk."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        storage = plane.dir / "registry"
        storage.mkdir(parents=True, exist_ok=True)
        self.process = plane.procs.start(
            "registry",
            [str(CRANE), "registry", "serve", "--address", self.host, "--disk", str(storage)],
        )
        kube.wait_for(self._up, 30, f"registry on {self.host}", interval=0.2)

    def _up(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"crane registry serve exited:\n{self.plane.procs.tail('registry')}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"http://{self.host}/v2/", timeout=2).status_code == 200
        return False

    def push(self, xpkg: pathlib.Path, package: str, version: str) -> str:
        """Pushes under ``package`` (a public name) with the registry host swapped in."""
        ref = f"{self.host}/{package.removeprefix(PUBLIC_REGISTRY)}:{version}"
        _run(CRANK, "xpkg", "push", "-f", xpkg, ref)
        return ref

    def tags(self, repository: str) -> list[str]:
        r = httpx.get(f"http://{self.host}/v2/{repository}/tags/list", timeout=10)
        r.raise_for_status()
        return r.json().get("tags") or []


# --- the package runtime stand-in ------------------------------------------------------------


@dataclasses.dataclass
class RunningProvider:
    """A provider revision's container, as the runtime stand-in started it."""

    revision: str
    image: str  # the reference Crossplane resolved, pulled from the registry
    service_account: str
    runtime_config: str  # the DeploymentRuntimeConfig it was made from
    args: list[str] | None  # the container's args (None: the image's command)
    port: int  # the health port it listens on


class PackageRuntime:
    """What a package runtime does for active Function and Provider revisions (module
    docstring); functions whose package name is in ``from_images`` run from their image, and so
    do plnt's own providers (the reconciler), always."""

    def __init__(
        self,
        plane: ControlPlane,
        from_images: Iterable[str] = (),
        local_providers: Iterable[str] = (),
    ) -> None:
        """``local_providers``: installed provider names whose controller runs as the shared
        stack runs it, a local process, once their revision is active (provider-kubernetes,
        the only one that can run here); the other providers are stand-ins nothing runs."""
        self.plane = plane
        self.from_images = set(from_images)
        self.local_providers = set(local_providers)
        self.endpoints: dict[str, str] = {}  # Function name -> 127.0.0.1:port
        self.started_from: dict[str, str] = {}  # Function name -> image ref or "process"
        self.providers: dict[str, RunningProvider] = {}  # by ProviderRevision name
        # the local providers' (provider-kubernetes), by ProviderRevision name
        self.local: dict[str, RunningProvider] = {}
        self.function_revisions: dict[str, str] = {}  # Function name -> the revision served
        self.errors: list[str] = []
        self.stopping = threading.Event()
        # Started from the thread that entered the namespace, so this thread (and what it
        # starts) lives in it too.
        self.thread = threading.Thread(target=self._loop, name="plnt-e2e-runtime", daemon=True)

    def start(self) -> PackageRuntime:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            for kind in ("FunctionRevision", "ProviderRevision"):
                try:
                    revisions = self.plane.mgmt.list(PKG, kind)
                    for revision in revisions:
                        self._reconcile(revision)
                    if kind == "ProviderRevision":
                        # a revision deleted (an uninstall) stops what ran for it
                        names = {r["metadata"]["name"] for r in revisions}
                        for gone in set(self.providers) - names:
                            self._stop_provider(gone)
                except Exception:  # a transient API error must not end the runtime
                    self._log(traceback.format_exc())
            self.stopping.wait(0.5)

    def _log(self, text: str) -> None:
        self.errors.append(text)
        del self.errors[:-20]
        with (self.plane.dir / "logs" / "package-runtime.log").open("a") as log:
            log.write(time.strftime("%H:%M:%S ") + text + "\n")

    def _reconcile(self, revision: dict[str, Any]) -> None:
        spec, status = revision["spec"], revision.get("status") or {}
        parent = (revision["metadata"].get("labels") or {}).get("pkg.crossplane.io/package")
        name = revision["metadata"]["name"]
        if parent is None:
            return
        if spec.get("desiredState") != "Active":
            self._stop_provider(name)  # an upgrade deactivates the revision it replaces
            return
        if not status.get("resolvedImage"):
            return  # the package manager has not pulled it yet
        secret_name = spec.get("tlsServerSecretName") or f"{parent}-tls-server"
        certs = self._server_secret(parent, secret_name, revision["metadata"])
        want: dict[str, Any] = {"tlsServerSecretName": secret_name}
        if revision["kind"] == "FunctionRevision":
            served = self.function_revisions.get(parent)
            if served != name:  # first, or an upgrade's revision
                if served is not None and status.get("endpoint") != self.endpoints[parent]:
                    # Crossplane's runtime gives a revision its package's Service as endpoint
                    # at once, and while the Deployment rolls that Service still reaches the old
                    # revision's pod: so does this address until the new server is ready.
                    want["endpoint"] = self.endpoints[parent]
                    self._patch_status(revision, want)
                    return
                self._start_function(parent, name, status["resolvedImage"], certs)
                if served is not None:
                    self._stop_function(served)
                self.function_revisions[parent] = name
            want["endpoint"] = self.endpoints[parent]
        elif is_plnt(spec.get("image") or "") and name not in self.providers:
            self._start_provider(revision, parent, status["resolvedImage"])
        elif parent in self.local_providers and LOCAL_PROVIDER not in self.plane.procs.running:
            self._start_local_provider(revision, parent, status["resolvedImage"])
        conditions = status.get("conditions") or []
        healthy = any(c["type"] == "RuntimeHealthy" and c["status"] == "True" for c in conditions)
        if healthy and all(status.get(k) == v for k, v in want.items()):
            return
        others = [c for c in conditions if c["type"] != "RuntimeHealthy"]
        runtime = {
            "type": "RuntimeHealthy",
            "status": "True",
            "reason": "HealthyPackageRevision",
            "lastTransitionTime": _now(),
        }
        # The conditions as read, plus ours; the resourceVersion makes it fail rather than
        # overwrite what the package manager wrote since (the next pass retries).
        patch = {**want, "conditions": [*others, runtime]}
        self._patch_status(revision, patch)

    def _patch_status(self, revision: dict[str, Any], status: dict[str, Any]) -> None:
        meta = revision["metadata"]
        path = self.plane.mgmt.path(PKG, revision["kind"], meta["name"])
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status}
        r = self.plane.mgmt.http.patch(
            f"{path}/status",
            params={"fieldManager": "plnt-e2e-package-runtime"},
            headers={"Content-Type": "application/merge-patch+json"},
            content=json.dumps(body),
        )
        if r.status_code not in (200, 404, 409):
            raise RuntimeError(f"status of {revision['kind']} {meta['name']}: {r.text}")

    def _server_secret(self, parent: str, name: str, revision: dict[str, Any]) -> pathlib.Path:
        """The revision's server TLS Secret (created once, owned by the package as Crossplane's
        are, so it goes with it) and the same files on disk, laid out as Crossplane mounts the
        Secret at /tls/server."""
        directory = self.plane.dir / "runtime" / parent / "tls-server"
        if not (directory / "tls.crt").is_file():
            pair = self.plane.ca.server(parent, "127.0.0.1", f"{parent}.{CROSSPLANE_NAMESPACE}")
            self.plane.ca.write_dir(directory, pair)
        if self.plane.mgmt.get("v1", "Secret", name, CROSSPLANE_NAMESPACE) is None:
            self.plane.mgmt.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {
                        "name": name,
                        "namespace": CROSSPLANE_NAMESPACE,
                        "ownerReferences": revision.get("ownerReferences") or [],
                    },
                    "type": "kubernetes.io/tls",
                    "stringData": {
                        f: (directory / f).read_text() for f in ("tls.crt", "tls.key", "ca.crt")
                    },
                },
                manager="plnt-e2e-package-runtime",
            )
        return directory

    def _start_function(
        self, name: str, revision: str, image_ref: str, certs: pathlib.Path
    ) -> None:
        """Starts function ``name``'s server for ``revision`` (the process or container is
        named after the revision, so the old one serves until this one is ready)."""
        port = free_port()
        address = f"127.0.0.1:{port}"
        package = name.removeprefix("plnt-")
        if package in self.from_images:
            pulled = self.plane.dir / "runtime" / name / (_file_name(image_ref) + ".tar")
            tarball = images.pull(image_ref, pulled, CRANE)
            process = self.plane.images.start(revision, tarball, certs, port).process
            self.started_from[name] = image_ref
        else:
            process = self.plane.procs.start(
                revision,
                [
                    str(plnt_procs.PLNT),
                    "function",
                    name,
                    "--tls-certs-dir",
                    str(certs),
                    "--address",
                    address,
                ],
            )
            self.started_from[name] = "process"
        plnt_procs.wait_ready(
            address, process, timeout=120, credentials=self.plane._grpc_credentials()
        )
        self.endpoints[name] = address

    def _stop_function(self, revision: str) -> None:
        """Stops what served ``revision``."""
        if revision in self.plane.images.running:
            self.plane.images.stop(revision)
        else:
            self.plane.procs.stop(revision)

    # --- providers: what Crossplane's Deployment runtime makes of a ProviderRevision ----------

    def runtime_config(self, revision: dict[str, Any]) -> dict[str, Any]:
        """The DeploymentRuntimeConfig Crossplane would use: the one named by the ImageConfig
        whose prefix matches the resolved image longest (among those with spec.runtime), else
        the revision's own runtimeConfigRef (``default`` unless set)."""
        image = (revision.get("status") or {}).get("resolvedImage") or ""
        best, longest = None, -1
        for config in self.plane.mgmt.list("pkg.crossplane.io/v1beta1", "ImageConfig"):
            ref = ((config["spec"].get("runtime") or {}).get("configRef") or {}).get("name")
            for match in config["spec"].get("matchImages") or []:
                prefix = match.get("prefix", "")
                if ref and image.startswith(prefix) and len(prefix) > longest:
                    best, longest = ref, len(prefix)
        name = best or (revision["spec"].get("runtimeConfigRef") or {}).get("name") or "default"
        found = self.plane.mgmt.get("pkg.crossplane.io/v1beta1", "DeploymentRuntimeConfig", name)
        if found is None:
            raise LookupError(f"DeploymentRuntimeConfig {name} (for {image}) does not exist")
        return found

    def _deployment(
        self, revision: dict[str, Any], parent: str, image_ref: str
    ) -> tuple[dict[str, Any], str, dict[str, Any]]:
        """The revision's ServiceAccount and Deployment as Crossplane makes them from the runtime
        config; returns that config, the ServiceAccount's name and the runtime container as the
        config sets it."""
        name = revision["metadata"]["name"]
        config = self.runtime_config(revision)
        account = ((config["spec"].get("serviceAccountTemplate") or {}).get("metadata") or {}).get(
            "name"
        ) or name
        owner = {
            "apiVersion": PKG,
            "kind": "ProviderRevision",
            "name": name,
            "uid": revision["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        self.plane.mgmt.apply(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": account,
                    "namespace": CROSSPLANE_NAMESPACE,
                    "ownerReferences": [owner],
                },
            },
            manager="plnt-e2e-package-runtime",
        )
        template = (config["spec"].get("deploymentTemplate") or {}).get("spec") or {}
        pod = (template.get("template") or {}).get("spec") or {}
        container: dict[str, Any] = next(
            (c for c in pod.get("containers") or [] if c.get("name") == RUNTIME_CONTAINER), {}
        )
        labels = {"pkg.crossplane.io/revision": name, "pkg.crossplane.io/provider": parent}
        # The Deployment, as `kubectl get deployment` shows it (no controller runs it here: the
        # container below is its one pod).
        self.plane.mgmt.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": name,
                    "namespace": CROSSPLANE_NAMESPACE,
                    "ownerReferences": [owner],
                },
                "spec": {
                    "replicas": template.get("replicas", 1),
                    "strategy": template.get("strategy") or {"type": "RollingUpdate"},
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "serviceAccountName": account,
                            "containers": [
                                {**container, "name": RUNTIME_CONTAINER, "image": image_ref}
                            ],
                        },
                    },
                },
            },
            manager="plnt-e2e-package-runtime",
        )
        return config, account, container

    def _start_provider(self, revision: dict[str, Any], parent: str, image_ref: str) -> None:
        """The revision's ServiceAccount and Deployment, then its container: the image pulled
        from the registry under runc, as the pod user, with a token of that ServiceAccount where
        in-cluster clients read it and nothing else to authenticate with."""
        name = revision["metadata"]["name"]
        config, account, container = self._deployment(revision, parent, image_ref)
        directory = self.plane.dir / "runtime" / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(self._token(account))
        (directory / "namespace").write_text(CROSSPLANE_NAMESPACE)
        tarball = images.pull(image_ref, directory / "image.tar", CRANE)
        entrypoint = container.get("command") or oci.image_config(tarball).get("Entrypoint") or []
        args = container.get("args")
        argv = None if args is None else [*entrypoint, *args]
        port = _health_port(args)
        env = [
            "KUBERNETES_SERVICE_HOST=127.0.0.1",
            f"KUBERNETES_SERVICE_PORT={self.plane.mgmt.port}",
            f"POD_NAMESPACE={CROSSPLANE_NAMESPACE}",
            f"PROVIDER_NAME={parent}",
            f"REVISION_NAME={name}",
            *(f"{e['name']}={e['value']}" for e in container.get("env") or [] if "value" in e),
        ]
        files = {
            SERVICE_ACCOUNT_DIR: {
                "token": directory / "token",
                "ca.crt": self.plane.mgmt.dir / "ca.crt",
                "namespace": directory / "namespace",
            }
        }
        running = self.plane.images.start_program(
            name, tarball, args=argv, env=env, files=files, port=port
        )
        try:
            running.wait_listening(120)
        except BaseException:
            self.plane.images.stop(name)  # the next pass starts it afresh
            raise
        self.providers[name] = RunningProvider(
            revision=name,
            image=image_ref,
            service_account=account,
            runtime_config=config["metadata"]["name"],
            args=args,
            port=port,
        )

    def _start_local_provider(self, revision: dict[str, Any], parent: str, image_ref: str) -> None:
        """provider-kubernetes, whose stand-in package has no image: its ServiceAccount and
        Deployment from the runtime config, as for any provider, and its controller as the
        stack's local process with the container arguments that config sets."""
        name = revision["metadata"]["name"]
        config, account, container = self._deployment(revision, parent, image_ref)
        args = container.get("args")
        self.plane._start_provider_kubernetes(args)
        (probe,) = [a for a in self.plane.provider_argv if a.startswith("--health-probe-bind")]
        self.local[name] = RunningProvider(
            revision=name,
            image=image_ref,
            service_account=account,
            runtime_config=config["metadata"]["name"],
            args=args,
            port=int(probe.rsplit(":", 1)[1]),
        )

    def _token(self, account: str) -> str:
        """A token of the ServiceAccount from the TokenRequest API, as the kubelet gets one."""
        r = self.plane.mgmt.http.post(
            f"/api/v1/namespaces/{CROSSPLANE_NAMESPACE}/serviceaccounts/{account}/token",
            json={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": TOKEN_SECONDS},
            },
        )
        r.raise_for_status()
        return r.json()["status"]["token"]

    def _stop_provider(self, name: str) -> None:
        if self.providers.pop(name, None) is not None:
            self.plane.images.stop(name)


def _file_name(image_ref: str) -> str:
    return image_ref.replace("/", "_").replace(":", "_")


def _health_port(args: list[str] | None) -> int:
    """The port `plnt reconcile` serves its probes on: --health-address's, else its default."""
    for arg in args or []:
        if arg.startswith("--health-address="):
            return int(arg.rsplit(":", 1)[1])
    return 8081


# --- installing ------------------------------------------------------------------------------


class Install:
    """Everything the package-install test sets up on a bare ControlPlane, in order."""

    def __init__(
        self,
        plane: ControlPlane,
        *,
        from_images: Iterable[str] = (),
        local_providers: Iterable[str] = (),
    ) -> None:
        self.plane = plane
        self.registry = Registry(plane)
        self.runtime = PackageRuntime(plane, from_images, local_providers)
        self.pushed: dict[str, str] = {}  # public package -> the reference pushed
        self.install_seconds: float | None = None
        self.mirrored: dict[str, list[str]] = {}  # ImageConfig -> the mirror's prefixes added

    def publish(self, built: dict[str, pathlib.Path], version: str = "") -> None:
        """Pushes the Configuration, every function and the reconciler, and a stand-in for every
        other provider; with ``version`` (a second build's) plnt's own packages only, under it."""
        config = configuration()
        name = config["metadata"]["name"]
        public = f"{PLNT_REGISTRY}{name}"
        self.pushed[public] = self.registry.push(
            built[name], public, version or "v" + _project_version()
        )
        for dep in dependencies():
            package, dep_version = dep["package"], dep["version"]
            if is_plnt(package):
                xpkg = built[package.rsplit("/", 1)[1]]
                dep_version = version or dep_version
            elif version:
                continue  # the providers of the first install stand
            else:
                xpkg = stand_in_provider(package, dep_version, self.plane.dir)
            self.pushed[package] = self.registry.push(xpkg, package, dep_version)

    def configure_registry(self) -> dict[str, Any]:
        return self.plane.mgmt.apply(
            {
                "apiVersion": "pkg.crossplane.io/v1beta1",
                "kind": "ImageConfig",
                "metadata": {"name": IMAGE_CONFIG},
                "spec": {
                    "matchImages": [{"type": "Prefix", "prefix": PUBLIC_REGISTRY}],
                    "rewriteImage": {"prefix": f"{self.registry.host}/"},
                },
            }
        )

    def prerequisites(self) -> None:
        """What README's "Installing" asks for before plnt, beside Crossplane: Gateway API's
        CRDs on the control plane (the vendored ones plnt composes against)."""
        docs = [
            doc
            for path in sorted((REPO / "third_party" / "crds").glob("gateway.networking.k8s.io_*"))
            for doc in kube.load_yaml(path)
        ]
        self.plane.mgmt.create_crds(docs)

    def run_readme(self) -> list[list[str]]:
        """README's install commands, verbatim, in order (`kubectl` against this control plane,
        `crossplane` the real CLI); after `kubectl apply -f package/install/` the mirror's path
        goes into its ImageConfigs, as README says a user with a mirror does.
        Returns the commands run."""
        commands = readme_install_commands()
        for argv in commands:
            if argv[0] == "kubectl":
                cmd = [str(kube.KUBECTL), "--kubeconfig", str(self.plane.kubeconfig), *argv[1:]]
            elif argv[0] == "crossplane":
                cmd = [str(CRANK), *argv[1:]]
            else:
                raise AssertionError(f"README's install runs {argv[0]}, which the test cannot")
            proc = subprocess.run(
                cmd,
                cwd=REPO,
                env={**os.environ, "KUBECONFIG": str(self.plane.kubeconfig)},
                capture_output=True,
                text=True,
                check=False,
                timeout=CRANK_SECONDS,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)}: {proc.stdout}{proc.stderr}")
            if argv[:3] == ["kubectl", "apply", "-f"] and argv[3].rstrip("/") == "package/install":
                self.mirrored = self.mirror_runtime_image_configs()
        return commands

    def mirror_runtime_image_configs(self) -> dict[str, list[str]]:
        """Adds the loopback registry's path to the ImageConfigs of package/install that select
        a runtime config (the reconciler's, RECONCILER_IMAGE_CONFIG, and provider-kubernetes'),
        for each of their prefixes that names a package this registry serves, as README says a
        user with a mirror does (Crossplane matches the image it resolved). Returns the prefixes
        added, by ImageConfig."""
        configs = install_docs("ImageConfig")
        assert RECONCILER_IMAGE_CONFIG in configs, sorted(configs)
        host = self.registry.host + "/"
        added: dict[str, list[str]] = {}
        for name, doc in configs.items():
            if not (doc["spec"].get("runtime") or {}).get("configRef"):
                continue
            current = self.plane.mgmt.get(doc["apiVersion"], doc["kind"], name)
            assert current is not None, f"kubectl apply -f package/install/ made no {name}"
            matches = current["spec"]["matchImages"]
            mirror = [
                {"type": "Prefix", "prefix": m["prefix"].replace(PUBLIC_REGISTRY, host, 1)}
                for m in matches
                if any(package.startswith(m["prefix"]) for package in self.pushed)
            ]
            if not mirror:
                continue
            r = self.plane.mgmt.http.patch(
                self.plane.mgmt.path(doc["apiVersion"], doc["kind"], name),
                headers={"Content-Type": "application/merge-patch+json"},
                content=json.dumps({"spec": {"matchImages": matches + mirror}}),
            )
            r.raise_for_status()
            added[name] = [m["prefix"] for m in mirror]
        assert RECONCILER_IMAGE_CONFIG in added, added
        return added

    def wait_installed(self, seconds: float = INSTALL_SECONDS) -> None:
        """Waits for the Configuration, then each dependency in crossplane.yaml's order, to be
        Installed and Healthy, all within one deadline of ``seconds``."""
        deadline = time.monotonic() + seconds
        wanted = [("Configuration", configuration_name())] + [
            (dep["kind"], installed_name(dep["package"])) for dep in dependencies()
        ]
        for kind, name in wanted:
            live.wait_object(
                self.plane.mgmt,
                PKG,
                kind,
                name,
                until=healthy,
                seconds=max(deadline - time.monotonic(), 1),
                what=f"{kind} {name} Installed and Healthy (all {len(wanted)} within {seconds} s)",
            )

    def stop(self) -> None:
        self.runtime.stop()


def readme_install_commands() -> list[list[str]]:
    """The commands of README's "Installing into a control plane": its first shell block, one
    command a line, comments dropped."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Installing into a control plane") :]
    block = section[section.index("```sh\n") + len("```sh\n") :]
    block = block[: block.index("```")]
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def configuration_name() -> str:
    """The name README's `crossplane xpkg install configuration PACKAGE NAME` gives it."""
    for argv in readme_install_commands():
        if argv[:3] == ["crossplane", "xpkg", "install"] and argv[3] == "configuration":
            return argv[5]
    raise AssertionError("README installs no Configuration with `crossplane xpkg install`")


def healthy(obj: dict[str, Any] | None) -> bool:
    conds = {
        c["type"]: c["status"] for c in ((obj or {}).get("status") or {}).get("conditions") or []
    }
    return conds.get("Installed") == "True" and conds.get("Healthy") == "True"


def _project_version() -> str:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def _run(*cmd: str | pathlib.Path) -> None:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, check=False, timeout=CRANK_SECONDS
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: {proc.stdout}{proc.stderr}")
