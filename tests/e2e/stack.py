"""A live Crossplane control plane on this machine, with no Docker, kubelet or registry.

What runs, all inside a private network namespace (tests/e2e/netns.py) on loopback:

- the management cluster: etcd + kube-apiserver, kube-controller-manager (garbage collector and
  namespace controller: without them neither ownerReference cascades nor Crossplane's
  foreground deletes finish), Crossplane core (`crossplane core start`, v2.3) with
  `--package-runtime=External`, provider-kubernetes as a local process, and every plnt
  function as a local `plnt function NAME --tls-certs-dir DIR` process serving mTLS;
- one workload cluster per InferenceCluster the tests make (etcd + kube-apiserver +
  kube-controller-manager + kube-scheduler + kwok: tests/e2e/workload.py), reached only through
  the kubeconfig Secrets plnt composes or the tests provide, exactly as provider-kubernetes
  would reach a real cluster;
- stand-ins for the controllers that cannot run here (tests/e2e/simulator.py): provider-coreweave,
  provider-helm, the gateway controller and data plane, CKS's NodePool controller and the GPU
  driver's ResourceSlices. They write only what the real ones write; where a chart would run
  the LeaderWorkerSet controller, the real one runs (tests/e2e/lws.py).

Crossplane finds a function by listing FunctionRevisions labelled
`pkg.crossplane.io/package=<Function name>` with `spec.desiredState: Active` and dialling
`status.endpoint`. The revisions are annotated `crossplane.io/paused: "true"`, so the package
manager never tries to pull an image, and their status carries the local endpoint and the
`composition` capability.

`python -m tests.e2e.stack` brings the same stack up for a person (`make dev`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import signal
import socket
import sys
import tempfile
import time
from typing import Any

import yaml

from plnt_host import procs as plnt_procs
from plnt_host import runtime
from tests.e2e import kube, netns, workload
from tests.e2e.images import ImageFunctions
from tests.e2e.kube import CA, LATENCY_NICE, APIServer, Processes, wait_for
from tests.reconcile.apiserver import REPO, TOOLS, free_port

SHARED_CRDS = REPO / "third_party" / "crds"  # vendored: third_party/SOURCES
TOOL_CRDS = REPO / ".tools" / "crds"
CROSSPLANE_CORE = TOOLS / "crossplane-core"
PROVIDER_KUBERNETES = TOOLS / "provider-kubernetes"
CROSSPLANE_NAMESPACE = "crossplane-system"
ADMIN_TOKEN = "plnt-e2e-admin"  # loopback-only credentials of throwaway servers
# The CoreWeave API access token the provider-coreweave ProviderConfig holds; the kubeconfig a
# CoreWeaveCluster composes authenticates to the CKS cluster with it.
COREWEAVE_TOKEN = "plnt-e2e-coreweave-token"
# Crossplane's poll interval: how often an XR is reconciled when nothing it watches changes and
# its functions set no TTL. (plnt's functions always answer with a TTL, the SDK's 60 s unless a
# step asks for less, and Crossplane then requeues after the TTL instead.)
POLL_INTERVAL = "5s"
# Crossplane's per-XR circuit breaker on watch events (a token bucket; default burst 100 and
# refill 1/s, open for 5 min with a probe every 30 s). Converging here trips it within seconds:
# the simulator and provider-kubernetes write the statuses of a dozen composed resources at
# once, several times each, and each change reaches the breaker many times over (seen: over 1000
# in 3 s for one ModelReplica as its Objects came up; InferenceCluster lab-h100 and every
# WorkflowRun replica tripped the default). An XR whose breaker is open sees a change only on
# its next 30 s probe or 60 s TTL requeue, which was most of the suite's time. This bucket still
# opens on a sustained storm (a fight between controllers) above the refill rate, and then
# closes after 10 s instead of 5 min; the suite never asserts on the breaker.
CIRCUIT_BREAKER = (
    "--circuit-breaker-burst=5000",
    "--circuit-breaker-refill-rate=100",
    "--circuit-breaker-cooldown=10s",
)
# provider-kubernetes' poll: how often each Object (plnt composes them without `watch`) reads its
# resource back from the workload cluster, e.g. a Deployment becoming available.
PROVIDER_POLL = "5s"


@dataclasses.dataclass(frozen=True)
class Settings:
    """How often each controller looks again; None leaves the program's own default."""

    crossplane_poll: str | None
    circuit_breaker: tuple[str, ...]
    provider_poll: str | None
    bind_interval: float
    # every API server writes an audit log (one JSON line per request) to logs/<server>-audit.log
    audit: bool = False
    # provider-kubernetes' --enable-watches (an Object watches its resource only if it asks to)
    provider_watches: bool = True


# The suite's: fast polls, so that a test waits for plnt rather than for a poll.
FAST = Settings(POLL_INTERVAL, CIRCUIT_BREAKER, PROVIDER_POLL, 1.0)
# The controllers' own: Crossplane's and provider-kubernetes' defaults and the binder's default
# interval, as if nothing set them.
DEFAULTS = Settings(None, (), None, 2.0, provider_watches=False)

INSTALL = REPO / "package" / "install"  # README: `kubectl apply -f package/install/`


def install_docs(kind: str) -> dict[str, dict[str, Any]]:
    """package/install's documents of ``kind``, by name."""
    return {
        doc["metadata"]["name"]: doc
        for path in sorted(INSTALL.glob("*.yaml"))
        for doc in kube.load_yaml(path)
        if doc["kind"] == kind
    }


def install_runtime_args(package: str) -> list[str] | None:
    """The container arguments package/install gives ``package`` (a repository crossplane.yaml
    depends on): those of the DeploymentRuntimeConfig named by the ImageConfig whose prefix
    matches it longest, as Crossplane chooses; None when no ImageConfig there selects one, or
    the runtime config sets no arguments (the image's own command then)."""
    best, longest = None, -1
    for config in install_docs("ImageConfig").values():
        ref = ((config["spec"].get("runtime") or {}).get("configRef") or {}).get("name")
        for match in config["spec"].get("matchImages") or []:
            prefix = match.get("prefix", "")
            if ref and package.startswith(prefix) and len(prefix) > longest:
                best, longest = ref, len(prefix)
    if best is None:
        return None
    template = install_docs("DeploymentRuntimeConfig")[best]["spec"]["deploymentTemplate"]
    containers = template["spec"]["template"]["spec"]["containers"]
    (container,) = [c for c in containers if c["name"] == "package-runtime"]
    return container.get("args")


PROVIDER_METRICS_PORT = 8080


def _require_port_free(port: int, why: str) -> None:
    """Fails at once, saying ``why``, when something in this network namespace listens on
    ``port``, instead of leaving a controller that exits on start to a long wait."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))  # conflicts with a listener on any address
        except OSError as err:
            raise RuntimeError(f"port {port} is taken ({err}): {why}") from None


def _flag_value(args: list[str], name: str) -> str | None:
    """The value of ``name`` in an argument list (``--name=value`` or ``--name value``)."""
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return None


def package_settings() -> Settings:
    """What `kubectl apply -f package/install/` and the packages set: Crossplane's own poll and
    circuit breaker (the install leaves Crossplane's flags alone), provider-kubernetes' poll and
    watches as its runtime config there sets them, and the binder's interval as the reconciler's
    arguments there set it (`plnt reconcile`'s default when they do not)."""
    from plnt_reconciler import cli

    dependencies = yaml.safe_load((REPO / "crossplane.yaml").read_text())["spec"]["dependsOn"]
    by_name = {d["package"].rsplit("/", 1)[1]: d["package"] for d in dependencies}
    provider = install_runtime_args(by_name["provider-kubernetes"]) or []
    reconciler = install_runtime_args(by_name["plnt-reconciler"])
    if reconciler is not None:
        assert reconciler[:1] == ["reconcile"], reconciler
        reconciler = reconciler[1:]
    binder = cli.build_parser().parse_args(reconciler or []).bind_interval
    return Settings(
        None,
        (),
        _flag_value(provider, "--poll"),
        binder,
        provider_watches="--enable-watches" in provider,
    )


# A user's, installed as README says: read from package/install, so it cannot drift from it.
PACKAGE = package_settings()

AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
"""

# Crossplane, provider-kubernetes and plnt's functions: which CRDs the management cluster needs
# beyond Crossplane's own. provider-coreweave and provider-helm cannot run here; their CRDs
# come from third_party/crds, and the simulator plays their controllers.
MANAGEMENT_CRDS = (
    "helm.m.crossplane.io_releases.yaml",
    "helm.m.crossplane.io_providerconfigs.yaml",
    "helm.m.crossplane.io_clusterproviderconfigs.yaml",
    "cks.coreweave.m.crossplane.io_clusters.yaml",
    "networking.coreweave.m.crossplane.io_vpcs.yaml",
    "coreweave.m.crossplane.io_providerconfigs.yaml",
    "coreweave.m.crossplane.io_clusterproviderconfigs.yaml",
    "gateway.networking.k8s.io_gatewayclasses.yaml",
    "gateway.networking.k8s.io_gateways.yaml",
    "gateway.networking.k8s.io_httproutes.yaml",
    "gateway.networking.k8s.io_referencegrants.yaml",
)


# What the e2e suite's control plane runs from built images (the rest from the virtualenv): the
# InferenceClass function, which every scenario's classes compose through.
FUNCTIONS_FROM_IMAGES = ("function-inference-class",)


def missing() -> list[str]:
    gaps = kube.missing_binaries()
    for binary in (CROSSPLANE_CORE, PROVIDER_KUBERNETES):
        if not binary.is_file():
            gaps.append(str(binary))
    return gaps


@dataclasses.dataclass
class FunctionProcess:
    name: str  # plnt-function-...
    address: str
    certs: pathlib.Path
    image: pathlib.Path | None = None  # run from this .xpkg under runc (tests/e2e/images.py)


class ControlPlane:
    """The whole stack; `close()` stops every process it started, by process id."""

    def __init__(
        self,
        workdir: pathlib.Path,
        *,
        functions_from_images: tuple[str, ...] = (),
        images: pathlib.Path | None = None,
        bare: bool = False,
        settings: Settings = FAST,
        crossplane_rbac: bool = False,
        crossplane_flags: tuple[str, ...] = (),
    ):
        """``functions_from_images``: functions (``function-model-replica``, ...) that run from
        their built image under runc instead of from the virtualenv; ``images`` is the folder
        `make package` wrote their .xpkg files to (default dist/). ``bare``: only the management
        API server, its controllers and Crossplane core, with nothing of plnt, its functions or
        its providers installed (tests/e2e/packages.py installs them as a user would).
        ``settings``: the controllers' intervals (the suite's fast polls by default).
        ``crossplane_rbac``: Crossplane runs as its ServiceAccount with the ClusterRole its Helm
        chart installs (aggregating what the RBAC manager, also running, and plnt's install
        grant it), not as an administrator. ``crossplane_flags``: more flags for Crossplane core
        (an alpha feature a test needs)."""
        gaps = missing()
        if gaps:
            raise RuntimeError(
                "the live control plane needs " + ", ".join(gaps) + ": run `make test` "
                "(hack/setup-test.sh builds them)"
            )
        netns.enter()
        self.dir = workdir
        self.settings = settings
        self.procs = Processes(workdir / "logs")
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.ca = CA.make()
        self.workloads: dict[str, APIServer] = {}
        self.functions: dict[str, FunctionProcess] = {}
        self.simulator: Any = None
        self.bare = bare
        self.crossplane_rbac = crossplane_rbac
        self.crossplane_flags = crossplane_flags
        self.from_images = _function_images(functions_from_images, images)
        self.images = ImageFunctions(workdir / "images", workdir / "logs")
        try:
            self._boot()
        except BaseException:
            self.close()
            raise

    # --- boot -----------------------------------------------------------------------------------

    def _boot(self) -> None:
        started = time.monotonic()
        self.mgmt = APIServer(
            "mgmt",
            self.dir / "mgmt",
            self.procs,
            self.ca,
            {ADMIN_TOKEN: ("admin", "system:masters")},
            self._audit_args("mgmt"),
        )
        self.kubeconfig = self.mgmt.kubeconfig(self.dir / "kubeconfig")
        controllers = "garbage-collector-controller,namespace-controller"
        if self.crossplane_rbac:  # fills the ClusterRoles that aggregate others (Crossplane's)
            controllers += ",clusterrole-aggregation-controller"
        kube.controller_manager("mgmt", self.procs, self.kubeconfig, controllers)
        self._install_crds(crossplane_only=self.bare)
        self.mgmt.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CROSSPLANE_NAMESPACE}}
        )
        self.mgmt.apply(
            {
                "apiVersion": "pkg.crossplane.io/v1beta1",
                "kind": "Lock",
                "metadata": {"name": "lock"},
            }
        )
        if self.bare:
            if self.crossplane_rbac:
                self._crossplane_service_account()
            self._start_crossplane()
            self.boot_seconds = time.monotonic() - started
            return
        self._start_functions()
        self._start_crossplane()
        self._start_provider_kubernetes()
        self._install_plnt()
        self._start_binder()
        from tests.e2e import simulator

        self.simulator = simulator.Simulator(self)
        self.simulator.start()
        self.boot_seconds = time.monotonic() - started

    def _install_crds(self, *, crossplane_only: bool = False) -> None:
        docs: list[dict[str, Any]] = []
        for path in sorted((TOOL_CRDS / "crossplane").glob("*.yaml")):
            docs += kube.load_yaml(path)
        if crossplane_only:
            self.mgmt.create_crds(docs)
            return
        for path in sorted((TOOL_CRDS / "provider-kubernetes").glob("*.yaml")):
            for doc in kube.load_yaml(path):
                # its conversion webhook is not served by a local process; v1alpha1 Objects
                # (cluster-scoped, legacy) are not used by plnt
                doc["spec"].pop("conversion", None)
                docs.append(doc)
        for name in MANAGEMENT_CRDS:
            docs += kube.load_yaml(SHARED_CRDS / name)
        self.mgmt.create_crds(docs)

    def _start_functions(self) -> None:
        """Every plnt function as a local mTLS server, and its paused FunctionRevision."""
        started = []
        for package in runtime.function_names():
            name = runtime.INSTALLED_PREFIX + package
            certs = self.ca.write_dir(
                self.dir / "functions" / name, self.ca.server(name, "127.0.0.1")
            )
            address = f"127.0.0.1:{free_port()}"
            image = self.from_images.get(package)
            self.functions[name] = FunctionProcess(name, address, certs, image)
            started.append(name)
            self.start_function(name)
        for name in started:
            fn = self.functions[name]
            plnt_procs.wait_ready(
                fn.address, self._function_process(name), credentials=self._grpc_credentials()
            )
            self._register_function(fn)

    def start_function(self, name: str) -> None:
        fn = self.functions[name]
        if fn.image is not None:
            self.images.start(name, fn.image, fn.certs, int(fn.address.rsplit(":", 1)[1]))
            return
        self.procs.start(
            name,
            [
                str(plnt_procs.PLNT),
                "function",
                name,
                "--tls-certs-dir",
                str(fn.certs),
                "--address",
                fn.address,
                # each call's request and response bytes (tests/e2e/test_fleet_view.py)
                *(["--debug"] if name == "plnt-function-model-deployment" else []),
            ],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            nice=LATENCY_NICE if name == "plnt-function-canary-gate" else None,
        )

    def _function_process(self, name: str) -> Any:
        """The Popen that lives as long as the function: its own, or the runtime's (runc run)."""
        if name in self.images.running:
            return self.images.running[name].running.process
        return self.procs.running[name]

    def _grpc_credentials(self) -> Any:
        import grpc

        client = self.ca.client("crossplane")
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca.pair.cert,
            private_key=client.key,
            certificate_chain=client.cert,
        )

    def _register_function(self, fn: FunctionProcess) -> None:
        package = f"xpkg.crossplane.io/plnt/{fn.name.removeprefix(runtime.INSTALLED_PREFIX)}:v0.1.0"
        paused = {"crossplane.io/paused": "true"}
        function = self.mgmt.apply(
            {
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": "Function",
                "metadata": {"name": fn.name, "annotations": paused},
                "spec": {"package": package},
            }
        )
        revision = {
            "apiVersion": "pkg.crossplane.io/v1",
            "kind": "FunctionRevision",
            "metadata": {
                "name": f"{fn.name}-local",
                "annotations": paused,
                "labels": {"pkg.crossplane.io/package": fn.name},
                "ownerReferences": [
                    {
                        "apiVersion": "pkg.crossplane.io/v1",
                        "kind": "Function",
                        "name": fn.name,
                        "uid": function["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {"desiredState": "Active", "image": package, "revision": 1},
        }
        self.mgmt.apply(revision)
        self.mgmt.patch_status(
            revision,
            {
                "endpoint": fn.address,
                "capabilities": ["composition"],
                # what the package manager and a package runtime would report
                "conditions": [
                    {
                        "type": "RevisionHealthy",
                        "status": "True",
                        "reason": "HealthyPackageRevision",
                        "lastTransitionTime": _now(),
                    },
                    {
                        "type": "RuntimeHealthy",
                        "status": "True",
                        "reason": "HealthyPackageRevision",
                        "lastTransitionTime": _now(),
                    },
                ],
            },
            manager="plnt-e2e-runtime",
        )

    def _start_crossplane(self) -> None:
        client_certs = self.ca.write_dir(
            self.dir / "crossplane" / "client", self.ca.client("crossplane")
        )
        self.crossplane_argv = [
            str(CROSSPLANE_CORE),
            "core",
            "start",
            "--package-runtime=External",
            "--enable-webhooks=false",
            f"--tls-client-certs-dir={client_certs}",
            f"--metrics-port={free_port()}",
            f"--health-probe-port={free_port()}",
            f"--webhook-port={free_port()}",
            *_flag("--poll-interval", self.settings.crossplane_poll),
            *self.settings.circuit_breaker,
            f"--xpkg-cache-dir={self.dir / 'crossplane' / 'xpkg-cache'}",
            f"--xfn-cache-dir={self.dir / 'crossplane' / 'xfn-cache'}",
            "--debug",
            *self.crossplane_flags,
        ]
        (self.dir / "crossplane" / "xpkg-cache").mkdir(parents=True, exist_ok=True)
        self.start_crossplane()

    def start_crossplane(self) -> None:
        self.procs.start(
            "crossplane",
            self.crossplane_argv,
            env={
                **os.environ,
                "KUBECONFIG": str(self.crossplane_kubeconfig),
                "POD_NAMESPACE": CROSSPLANE_NAMESPACE,
            },
        )

    @property
    def crossplane_kubeconfig(self) -> pathlib.Path:
        """The admin's, or with ``crossplane_rbac`` one holding its ServiceAccount's token."""
        own = self.dir / "crossplane" / "kubeconfig"
        return own if own.is_file() else self.kubeconfig

    def _crossplane_service_account(self) -> None:
        """Crossplane's ServiceAccount, the ClusterRoles of its chart (`crossplane`, which
        aggregates every ClusterRole labelled rbac.crossplane.io/aggregate-to-crossplane, and
        its system rules) bound to it, a kubeconfig with a token of it, and the RBAC manager,
        which makes the aggregated roles for every XRD and provider package. (The RBAC manager
        runs as the administrator: it is not what is being proven.)"""
        for doc in crossplane_cluster_roles():
            self.mgmt.apply(doc)
        self.mgmt.apply(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "crossplane", "namespace": CROSSPLANE_NAMESPACE},
            }
        )
        self.mgmt.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "crossplane"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "crossplane",
                },
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": "crossplane",
                        "namespace": CROSSPLANE_NAMESPACE,
                    }
                ],
            }
        )
        r = self.mgmt.http.post(
            f"/api/v1/namespaces/{CROSSPLANE_NAMESPACE}/serviceaccounts/crossplane/token",
            json={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 24 * 3600},
            },
        )
        r.raise_for_status()
        doc = self.mgmt.kubeconfig_doc()
        (user,) = doc["users"]
        user["user"] = {"token": r.json()["status"]["token"]}
        (self.dir / "crossplane").mkdir(parents=True, exist_ok=True)
        (self.dir / "crossplane" / "kubeconfig").write_text(yaml.safe_dump(doc))
        self.procs.start(
            "crossplane-rbac-manager",
            [str(CROSSPLANE_CORE), "rbac", "start", "--debug"],
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )

    def _start_provider_kubernetes(self, args: list[str] | None = None) -> None:
        """provider-kubernetes as a local process, with the settings' poll and watches; or, with
        ``args`` (a package runtime config's container arguments), with those instead, as a
        Deployment's container arguments replace its image's. Either way it serves its health
        probe on a port of its own and logs at debug level."""
        certs = self.ca.write_dir(
            self.dir / "provider-kubernetes" / "tls",
            self.ca.server("provider-kubernetes", "127.0.0.1"),
        )
        # provider-kubernetes verifies a CKS API server against the system's roots (the CKS
        # kubeconfig carries no CA); here the workload API servers' CA is that root.
        bundle = self.dir / "provider-kubernetes" / "roots.pem"
        bundle.write_bytes(self.ca.pair.cert)
        flags = [*_flag("--poll", self.settings.provider_poll)]
        flags += ["--enable-watches"] if self.settings.provider_watches else []
        self.provider_argv = [
            str(PROVIDER_KUBERNETES),
            *(flags if args is None else args),
            f"--health-probe-bind-addr=127.0.0.1:{free_port()}",
            "--debug",
        ]
        self.provider_env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "TLS_SERVER_CERTS_DIR": str(certs),
            "SSL_CERT_FILE": str(bundle),
        }
        _require_port_free(
            PROVIDER_METRICS_PORT,
            "provider-kubernetes serves its metrics on this port (no flag moves it): another "
            "control plane's provider-kubernetes runs in this network namespace",
        )
        self.procs.start("provider-kubernetes", self.provider_argv, env=self.provider_env)

    def _install_plnt(self) -> None:
        """The XRDs and Compositions, applied with kubectl as a platform engineer would."""
        self.kubectl("apply", "-f", str(REPO / "apis"), "-R")
        xrds = [
            d["metadata"]["name"]
            for p in sorted((REPO / "apis").glob("*/definition.yaml"))
            for d in kube.load_yaml(p)
        ]
        for xrd in xrds:
            wait_for(
                lambda xrd=xrd: self._xrd_ready(xrd),
                120,
                f"XRD {xrd} Established and Offered",
            )
        self.kubectl("apply", "-f", str(REPO / "compositions"))

    def _start_binder(self) -> None:
        """`plnt reconcile --bind-only`: the one writer that commits replicas to pools (a
        ModelReplica renders nothing until it is bound; docs/scheduler.md, Binding)."""
        self.binder_argv = [
            str(plnt_procs.PLNT),
            "reconcile",
            "--bind-only",
            "--kubeconfig",
            str(self.kubeconfig),
            "--bind-interval",
            str(self.settings.bind_interval),
        ]
        self.procs.start(
            "plnt-binder", self.binder_argv, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )

    def _xrd_ready(self, name: str) -> bool:
        obj = self.mgmt.get("apiextensions.crossplane.io/v2", "CompositeResourceDefinition", name)
        conds = {
            c["type"]: c["status"]
            for c in ((obj or {}).get("status") or {}).get("conditions") or []
        }
        return conds.get("Established") == "True" and conds.get("Offered", "True") == "True"

    # --- workload clusters ------------------------------------------------------------------

    def workload(self, name: str) -> APIServer:
        """A workload cluster's API server, started on first use, with what any cluster has."""
        if name not in self.workloads:
            api = APIServer(
                f"wl-{name}",
                self.dir / "workloads" / name,
                self.procs,
                self.ca,
                {
                    ADMIN_TOKEN: ("admin", "system:masters"),
                    COREWEAVE_TOKEN: ("coreweave-org", "system:masters"),
                },
                self._audit_args(f"wl-{name}"),
            )
            kubeconfig = api.kubeconfig(self.dir / "workloads" / name / "kubeconfig")
            workload.start(f"wl-{name}", self.procs, kubeconfig)
            self.workloads[name] = api
        return self.workloads[name]

    def _audit_args(self, server: str) -> tuple[str, ...]:
        if not self.settings.audit:
            return ()
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        return (
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log(server)}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
        )

    def audit_log(self, server: str) -> pathlib.Path:
        """Where API server ``server`` (mgmt, wl-<cluster>) writes its audit log."""
        return self.dir / "logs" / f"{server}-audit.log"

    def pause_workload(self, name: str, stopped: bool) -> float:
        """Stops (SIGSTOP) or resumes (SIGCONT) a workload cluster's kube-apiserver, by its
        process id: it keeps its connections and answers nothing, as a hung API server. The
        simulator leaves that cluster alone meanwhile (its data plane serves on): it is told
        first, and the API server stops once a whole pass of the simulator has ended since, so
        no call of the simulator to it is under way (one would hang every cluster's stand-ins
        for the client's 30 s). Returns the time.monotonic() of the signal."""
        proc = self.procs.running[f"{self.workloads[name].name}-apiserver"]
        if stopped:
            self.simulator.paused.add(name)
            self.simulator.wait_passes(2)
            os.kill(proc.pid, signal.SIGSTOP)
            return time.monotonic()
        os.kill(proc.pid, signal.SIGCONT)
        at = time.monotonic()
        self.simulator.paused.discard(name)
        return at

    def workload_for_url(self, url: str) -> APIServer | None:
        for api in self.workloads.values():
            if url.rstrip("/") in (api.url, f"https://localhost:{api.port}"):
                return api
        return None

    # --- driving it -------------------------------------------------------------------------

    def kubectl(
        self, *args: str, check: bool = True, stdin: str | None = None, timeout: float = 120
    ) -> str:
        return kube.kubectl(self.kubeconfig, *args, check=check, stdin=stdin, timeout=timeout)

    def restart(self, name: str, *, kill: bool = True) -> None:
        """Kills (SIGKILL by default) and restarts one process: a function, crossplane,
        provider-kubernetes or plnt-binder."""
        if name in self.images.running:
            self.images.stop(name, kill=kill)
        else:
            self.procs.stop(name, kill=kill)
        if name == "crossplane":
            self.start_crossplane()
        elif name == "provider-kubernetes":
            self.procs.start(name, self.provider_argv, env=self.provider_env)
        elif name == "plnt-binder":
            self.procs.start(name, self.binder_argv, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        elif name in self.functions:
            self.start_function(name)
            plnt_procs.wait_ready(
                self.functions[name].address,
                self._function_process(name),
                credentials=self._grpc_credentials(),
            )
        else:
            raise KeyError(name)

    def close(self) -> None:
        if self.simulator is not None:
            self.simulator.stop()
        self.images.stop_all()
        self.procs.stop_all()
        netns.leave()


def _flag(name: str, value: str | None) -> tuple[str, ...]:
    return (f"{name}={value}",) if value is not None else ()


def crossplane_cluster_roles() -> list[dict[str, Any]]:
    """The ClusterRoles Crossplane's Helm chart installs for Crossplane itself (its
    clusterrole.yaml, copied into .tools by hack/install-controlplane.sh), rendered as the chart
    renders them with the RBAC manager deployed: named `crossplane`."""
    template = (TOOL_CRDS / "crossplane-rbac" / "clusterrole.yaml").read_text()
    lines = [
        line.replace('{{ template "crossplane.name" . }}', "crossplane")
        for line in template.splitlines()
        # the chart's labels, and the if/end around what the RBAC manager's presence adds
        if not line.strip().startswith(("{{- include", "{{- if", "{{- end"))
    ]
    docs = [d for d in yaml.safe_load_all("\n".join(lines)) if d]
    assert {d["metadata"]["name"] for d in docs} == {
        "crossplane",
        "crossplane:system:aggregate-to-crossplane",
    }, [d["metadata"]["name"] for d in docs]
    return docs


def _function_images(
    names: tuple[str, ...], folder: pathlib.Path | None
) -> dict[str, pathlib.Path]:
    """Each named function's .xpkg in ``folder`` (default dist/), which `make package` writes."""
    folder = folder or REPO / "dist"
    known = set(runtime.function_names())
    out = {}
    for name in names:
        if name not in known:
            raise ValueError(f"functions_from_images: {name} is not a plnt function ({known})")
        found = sorted(folder.glob(f"{name}-v*.xpkg"))
        if not found:
            raise RuntimeError(f"no {name}-v*.xpkg in {folder}: run `make package` first")
        out[name] = found[-1]
    return out


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# --- make dev ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.e2e.stack",
        description="Bring up plnt's live control plane (Crossplane core, provider-kubernetes, "
        "plnt's functions, a workload cluster) in a private network namespace, until Ctrl-C.",
    )
    parser.add_argument("--dir", help="working directory (default: a new temp dir)")
    parser.add_argument(
        "--no-fleet",
        action="store_true",
        help="leave out the control-plane Gateway and the Existing InferenceCluster lab-h100 "
        "(4 H100 nodes) that are otherwise applied, ready for a WorkflowRun",
    )
    parser.add_argument(
        "--from-image",
        action="append",
        default=[],
        metavar="FUNCTION",
        help="run this function (e.g. function-model-replica) from its image in dist/ under "
        "runc (repeatable; `make package` builds the images; default: none)",
    )
    args = parser.parse_args(argv)
    workdir = pathlib.Path(args.dir or tempfile.mkdtemp(prefix="plnt-dev-"))
    plane = ControlPlane(workdir, functions_from_images=tuple(args.from_image))
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    try:
        if not args.no_fleet:
            from tests.e2e import fleet  # it imports this module

            fleet.ensure(plane)
        # Ctrl-C is handled from before the banner: whoever reads it may press it at once.
        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)
        pid = os.getpid()
        print(
            f"plnt control plane up in {plane.boot_seconds:.0f} s (logs: {workdir / 'logs'}).\n"
            "It lives in a private network namespace; run kubectl inside it:\n\n"
            f"  nsenter --net=/proc/{pid}/task/{pid}/ns/net {kube.KUBECTL} "
            f"--kubeconfig {plane.kubeconfig} get plnt\n\n"
            "The fleet (InferenceCluster lab-h100) is Ready; try the seed's WorkflowRun with\n"
            "  ... apply -f examples/workflowrun-llama-70b/xr.yaml\n",
            flush=True,
        )
        while not stop:
            time.sleep(0.5)
    finally:
        started = len(plane.procs.running)
        plane.close()
        print(f"plnt control plane stopped ({started} processes).", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
