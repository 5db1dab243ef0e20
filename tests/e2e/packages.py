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
  with that Secret's certificates, and sets `status.endpoint`; then `RuntimeHealthy=True`.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from typing import Any

import httpx
import yaml

from plnt_host import procs as plnt_procs
from tests.e2e import images, kube, live
from tests.e2e.stack import CROSSPLANE_NAMESPACE, TOOL_CRDS, ControlPlane, _now
from tests.reconcile.apiserver import REPO, TOOLS, free_port

CRANE = TOOLS / "crane"
CRANK = TOOLS / "crank"
PUBLIC_REGISTRY = "xpkg.crossplane.io/"  # where crossplane.yaml says every package lives
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


def installed_name(package: str) -> str:
    """The name Crossplane gives a dependency: its repository path as a DNS label
    (xpkg.crossplane.io/plnt/function-x -> plnt-function-x)."""
    return package.split("/", 1)[1].replace("/", "-")


def build_packages(dist: pathlib.Path = DIST, only: Iterable[str] = ()) -> dict[str, pathlib.Path]:
    """The Configuration and every function's .xpkg (or only the named ones), by hack/package.py
    (as `make package`, cached); returns {package name: file}."""
    names = list(only) or ["configuration"] + [
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
                "its CRDs only; nothing runs it"
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


class PackageRuntime:
    """What a package runtime does for active Function and Provider revisions (module
    docstring); functions whose package name is in ``from_images`` run from their image."""

    def __init__(self, plane: ControlPlane, from_images: Iterable[str] = ()) -> None:
        self.plane = plane
        self.from_images = set(from_images)
        self.endpoints: dict[str, str] = {}  # Function name -> 127.0.0.1:port
        self.started_from: dict[str, str] = {}  # Function name -> image ref or "process"
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
                    for revision in self.plane.mgmt.list(PKG, kind):
                        self._reconcile(revision)
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
        if parent is None or spec.get("desiredState") != "Active":
            return
        if not status.get("resolvedImage"):
            return  # the package manager has not pulled it yet
        secret_name = spec.get("tlsServerSecretName") or f"{parent}-tls-server"
        certs = self._server_secret(parent, secret_name)
        want: dict[str, Any] = {"tlsServerSecretName": secret_name}
        if revision["kind"] == "FunctionRevision":
            if parent not in self.endpoints:
                self._start_function(parent, status["resolvedImage"], certs)
            want["endpoint"] = self.endpoints[parent]
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

    def _server_secret(self, parent: str, name: str) -> pathlib.Path:
        """The revision's server TLS Secret (created once) and the same files on disk, laid out
        as Crossplane mounts the Secret at /tls/server."""
        directory = self.plane.dir / "runtime" / parent / "tls-server"
        if not (directory / "tls.crt").is_file():
            pair = self.plane.ca.server(parent, "127.0.0.1", f"{parent}.{CROSSPLANE_NAMESPACE}")
            self.plane.ca.write_dir(directory, pair)
        if self.plane.mgmt.get("v1", "Secret", name, CROSSPLANE_NAMESPACE) is None:
            self.plane.mgmt.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": name, "namespace": CROSSPLANE_NAMESPACE},
                    "type": "kubernetes.io/tls",
                    "stringData": {
                        f: (directory / f).read_text() for f in ("tls.crt", "tls.key", "ca.crt")
                    },
                },
                manager="plnt-e2e-package-runtime",
            )
        return directory

    def _start_function(self, name: str, image_ref: str, certs: pathlib.Path) -> None:
        port = free_port()
        address = f"127.0.0.1:{port}"
        package = name.removeprefix("plnt-")
        if package in self.from_images:
            tarball = images.pull(image_ref, self.plane.dir / "runtime" / name / "image.tar", CRANE)
            process = self.plane.images.start(name, tarball, certs, port).process
            self.started_from[name] = image_ref
        else:
            process = self.plane.procs.start(
                name,
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


# --- installing ------------------------------------------------------------------------------


class Install:
    """Everything the package-install test sets up on a bare ControlPlane, in order."""

    def __init__(self, plane: ControlPlane, *, from_images: Iterable[str] = ()) -> None:
        self.plane = plane
        self.registry = Registry(plane)
        self.runtime = PackageRuntime(plane, from_images)
        self.pushed: dict[str, str] = {}  # public package -> the reference pushed
        self.install_seconds: float | None = None

    def publish(self, built: dict[str, pathlib.Path]) -> None:
        """Pushes the Configuration, every function and a stand-in for every provider."""
        config = configuration()
        name, version = config["metadata"]["name"], "v" + _project_version()
        public = f"{PUBLIC_REGISTRY}plnt/{name}"
        self.pushed[public] = self.registry.push(built[name], public, version)
        for dep in dependencies():
            package, dep_version = dep["package"], dep["version"]
            if dep["kind"] == "Function":
                xpkg = built[package.rsplit("/", 1)[1]]
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

    def apply_configuration(self) -> dict[str, Any]:
        config = configuration()
        package = f"{PUBLIC_REGISTRY}plnt/{config['metadata']['name']}:v{_project_version()}"
        return self.plane.mgmt.apply(
            {
                "apiVersion": PKG,
                "kind": "Configuration",
                "metadata": {"name": config["metadata"]["name"]},
                "spec": {"package": package},
            }
        )

    def wait_installed(self, seconds: float = INSTALL_SECONDS) -> None:
        """Waits for the Configuration, then each dependency in crossplane.yaml's order, to be
        Installed and Healthy, all within one deadline of ``seconds``."""
        deadline = time.monotonic() + seconds
        wanted = [("Configuration", configuration()["metadata"]["name"])] + [
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
