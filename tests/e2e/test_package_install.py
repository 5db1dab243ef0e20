"""plnt installed as README's "Installing into a control plane" says, by Crossplane's package
manager from a loopback registry, and what the install runs working (tests/e2e/packages.py says
how each piece stands in).

A control plane of its own (a bare ControlPlane: Crossplane core, nothing of plnt installed),
with what README asks for before plnt (Gateway API's CRDs) and a mirror of the packages (an
ImageConfig rewriting xpkg.crossplane.io/ to the loopback registry); then README's install
commands, verbatim: `kubectl apply -f package/install/` and `crossplane xpkg install
configuration ...`. Crossplane runs as its own ServiceAccount with the ClusterRole its Helm
chart installs and the RBAC manager beside it, as a real install does, so what it may compose
and read is what the install grants. What is installed here comes from those commands only: the
XRDs and Compositions out of the Configuration, the Functions and Providers out of its
dependencies (the reconciler among them), the Lock filled by the dependency manager. The
providers are stand-in packages (their CRDs): provider-kubernetes with its own CRDs (built from
v1.2.0, pushed as the v1.0.0 crossplane.yaml pins), whose controller runs as a local process
with the runtime config package/install gives it; provider-helm and provider-coreweave with
schemaless ones, played by the simulator. The runtime stand-in runs function-inference-class
and the reconciler from the images the package manager resolved (pulled from the registry,
under runc), the other functions as local processes.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import threading
import time

import httpx
import pytest
import yaml

from plnt import labels
from plnt.capacity import fleet_view
from tests.e2e import engines, fleet, kube, live, packages, stack

API = "modelplane.ai/v1alpha1"
FROM_IMAGE = "function-inference-class"
CLASS = "plnt-e2e-l40s-4x"
RECONCILER = "xpkg.crossplane.io/plnt/plnt-reconciler"
PROVIDER_KUBERNETES = "xpkg.crossplane.io/crossplane-contrib/provider-kubernetes"
SEED_RUN = stack.REPO / "examples" / "workflowrun-llama-70b" / "xr.yaml"
SEED_REPLICA = stack.REPO / "examples" / "model-replica-qwen3-8b"
WR = ("plnt.work/v1", "WorkflowRun")
MR = (API, "ModelReplica")
OBJECT = ("kubernetes.m.crossplane.io/v1alpha1", "Object")


@pytest.fixture(scope="module")
def installed(e2e_dir):
    gaps = stack.missing() + packages.missing()
    if gaps:
        pytest.fail("the package-install test needs " + ", ".join(gaps) + ": run `make test`")
    workdir = e2e_dir("packages")
    built = packages.build_packages()
    # Crossplane moves dependencies to the versions an updated Configuration pins only with this
    # alpha flag (README, "Upgrading"); the upgrade test needs it.
    plane = stack.ControlPlane(
        workdir,
        bare=True,
        crossplane_rbac=True,
        crossplane_flags=("--enable-dependency-version-upgrades",),
    )
    install = None
    try:
        install = packages.Install(plane, from_images=(FROM_IMAGE,))
        install.publish(built)
        install.prerequisites()
        install.configure_registry()
        install.runtime.start()
        started = time.monotonic()
        install.run_readme()
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
    conf = mgmt.get(packages.PKG, "Configuration", packages.configuration_name())
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
    name = packages.configuration_name()
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


def _l40s_class() -> dict:
    """An InferenceClass for Existing clusters only: function-inference-class, run from its
    image, composes it."""
    return {
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


def test_xr_composes_through_the_function_run_from_its_image(installed) -> None:
    plane = installed.plane
    plane.mgmt.apply(_l40s_class())
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
    container = plane.images.running[installed.runtime.function_revisions[fn]].running
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


def test_reconciler_runs_from_its_package_as_its_service_account(installed) -> None:
    """The binder and autoscaler come with the Configuration: Crossplane installed the
    plnt-reconciler Provider, the runtime ran its image with package/install/settings.yaml (the
    ImageConfig chose it) as ServiceAccount crossplane-system/plnt-reconciler, and the binder
    writes the fleet view with only the RBAC package/install/ grants."""
    plane, runtime = installed.plane, installed.runtime
    mgmt = plane.mgmt
    provider = mgmt.get(packages.PKG, "Provider", packages.installed_name(RECONCILER))
    assert packages.healthy(provider), provider["status"]
    revision_name = provider["status"]["currentRevision"]
    running = runtime.providers[revision_name]
    assert running.image == f"{installed.registry.host}/plnt/plnt-reconciler:v0.1.0"
    assert running.runtime_config == "plnt-reconciler"  # settings.yaml, through the ImageConfig
    assert running.service_account == "plnt-reconciler"
    assert running.args is not None and running.args[:2] == ["reconcile", "--bind"]

    # the process: the image's `plnt` with settings.yaml's arguments, as the pod user, with the
    # ServiceAccount's token and no other credential
    pid = plane.images.running[revision_name].running.pid()
    proc = pathlib.Path(f"/proc/{pid}")
    cmdline = (proc / "cmdline").read_bytes().decode().split("\0")[:-1]
    # the console script `plnt` (run by its interpreter), then exactly settings.yaml's args
    (at,) = [i for i, arg in enumerate(cmdline) if pathlib.Path(arg).name == "plnt"]
    assert cmdline[at + 1 :] == running.args, cmdline
    uid = next(
        line.split()[1]
        for line in (proc / "status").read_text().splitlines()
        if line.startswith("Uid:")
    )
    assert uid == "2000"
    token = _in_container(proc / "root", f"{packages.SERVICE_ACCOUNT_DIR}/token").read_text()
    review = mgmt.http.post(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
              "spec": {"token": token}},
    ).json()  # fmt: skip
    user = "system:serviceaccount:crossplane-system:plnt-reconciler"
    assert review["status"]["user"]["username"] == user, review["status"]
    env = (proc / "environ").read_bytes().decode().split("\0")
    assert not [e for e in env if e.startswith("KUBECONFIG=")], env

    # what that ServiceAccount may do is what package/install/ grants, and no more
    def allowed(verb: str, resource: str, group: str = "", namespace: str = "") -> bool:
        return _allowed(mgmt, user, verb, resource, group, namespace)

    assert allowed("patch", "modelreplicas", "modelplane.ai")
    assert allowed("update", "configmaps", namespace="plnt-system")
    assert allowed("patch", "inferencequotas/status", "modelplane.ai")
    assert not allowed("update", "configmaps", namespace="default")
    assert not allowed("list", "secrets", namespace="plnt-system")
    assert not allowed("update", "modelreplicas", "modelplane.ai", "default")

    # it works: ready, and the binder's fleet view written in plnt-system under its name
    def ready() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{running.port}/readyz", timeout=5).is_success
        except httpx.HTTPError:
            return False

    live.wait_for(ready, 120, "the reconciler's /readyz")
    index = live.wait_object(
        mgmt,
        "v1",
        "ConfigMap",
        fleet_view.INDEX_NAME,
        fleet_view.NAMESPACE,
        seconds=120,
        what="the binder's fleet view index",
    )
    managers = {f["manager"] for f in index["metadata"].get("managedFields") or []}
    assert "plnt-binder" in managers, managers
    # what `kubectl get` shows of it, as Crossplane's runtime would have made it
    (deployment,) = _provider_deployments(mgmt, packages.installed_name(RECONCILER))
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "plnt-reconciler"
    assert spec["containers"][0]["image"] == running.image
    _, rows = live.table(plane.kubectl("get", "provider"))
    assert [r for r in rows if r[0] == packages.installed_name(RECONCILER)], rows


def _provider_deployments(mgmt: kube.APIServer, provider: str) -> list[dict]:
    """The Deployments the package runtime made for Provider ``provider``'s revisions."""
    return [
        d
        for d in mgmt.list("apps/v1", "Deployment", namespace=stack.CROSSPLANE_NAMESPACE)
        if d["spec"]["template"]["metadata"]["labels"].get("pkg.crossplane.io/provider") == provider
    ]


def _in_container(root: pathlib.Path, path: str) -> pathlib.Path:
    """``path`` as the container sees it, under its root as the host sees it (/proc/PID/root):
    a symlink in the image (Debian's /var/run -> /run) resolves inside the root, not on the
    host."""
    out = root
    for part in pathlib.PurePosixPath(path).parts[1:]:
        out = out / part
        if out.is_symlink():
            target = pathlib.PurePosixPath(os.readlink(out))
            out = (root / str(target).lstrip("/")) if target.is_absolute() else out.parent / target
    return out


def _allowed(
    api: kube.APIServer, user: str, verb: str, resource: str, group: str, namespace: str
) -> bool:
    """The API server's own authorizer, asked (SubjectAccessReview)."""
    attrs = {"verb": verb, "resource": resource, "group": group, "namespace": namespace}
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": attrs},
    }
    reply = api.http.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=body)
    reply.raise_for_status()
    return bool(reply.json()["status"].get("allowed"))


def test_crossplane_runs_with_its_charts_rbac_and_plnts(installed) -> None:
    """Crossplane is no administrator here: it runs as crossplane-system/crossplane with the
    ClusterRole its Helm chart installs, which aggregates what the RBAC manager grants for every
    XRD and provider and what package/install/crossplane-rbac.yaml adds for plnt. The live
    WorkflowRun below composes and reads through exactly that."""
    plane = installed.plane
    pid = plane.procs.running["crossplane"].pid
    env = pathlib.Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    assert f"KUBECONFIG={plane.dir / 'crossplane' / 'kubeconfig'}" in env, env
    user = "system:serviceaccount:crossplane-system:crossplane"

    def allowed(verb: str, resource: str, group: str = "", namespace: str = "") -> bool:
        return _allowed(plane.mgmt, user, verb, resource, group, namespace)

    wanted = [
        ("list", "namespaces", ""),  # crossplane-rbac.yaml: functions read them
        ("watch", "gateways", "gateway.networking.k8s.io"),
        ("create", "httproutes", "gateway.networking.k8s.io"),  # ModelService composes them
        ("create", "endpointslices", "discovery.k8s.io"),
        ("create", "workflowruns", "plnt.work"),  # the RBAC manager, for the XRDs
        ("create", "objects", "kubernetes.m.crossplane.io"),  # ... and the providers' kinds
        ("create", "releases", "helm.m.crossplane.io"),
    ]

    def missing() -> list[tuple[str, str, str]]:
        return [w for w in wanted if not allowed(w[0], w[1], w[2], "default")]

    # the aggregation controller fills Crossplane's ClusterRole as the roles appear
    try:
        live.wait_for(lambda: not missing(), 60, "Crossplane's aggregated ClusterRole")
    except TimeoutError:
        raise AssertionError(f"Crossplane may not: {missing()}") from None
    assert not allowed("create", "clusterroles", "rbac.authorization.k8s.io")
    assert not allowed("list", "nodes")
    assert not allowed("create", "pods", namespace="default")


# --- serving on what the install brought -------------------------------------------------------


@pytest.fixture(scope="module")
def fleet_up(installed):
    """What a platform team brings after the install, and nothing more: an existing GPU cluster
    (its operators' nodes, DRA driver and LeaderWorkerSet controller), its kubeconfig Secret
    (the credential), its InferenceClass and the InferenceCluster that adopts it. The
    simulator plays what cannot run here (provider-helm, the gateway's controller and data
    plane); provider-kubernetes runs as a local process with the arguments of the runtime
    config package/install gives it."""
    from tests.e2e import simulator

    plane = installed.plane
    # provider-kubernetes' controller and the RBAC manager both serve metrics on :8080 (neither
    # has a flag for it): two pods can, two processes in one network namespace cannot. The RBAC
    # manager has made every role by now (no XRD or package changes from here on), so it stops
    # before provider-kubernetes starts.
    plane.procs.stop("crossplane-rbac-manager")
    installed.runtime.local_providers.add(packages.installed_name(PROVIDER_KUBERNETES))
    live.wait_for(
        lambda: plane.procs.running.get(packages.LOCAL_PROVIDER), 60, "provider-kubernetes"
    )
    plane.simulator = simulator.Simulator(plane)
    plane.simulator.start()
    fleet.apply_existing_cluster(plane)
    live.wait_ready(plane.mgmt, API, "InferenceCluster", fleet.CLUSTER, seconds=300)
    fleet.wait_in_view(plane, fleet.CLUSTER)  # written by the binder the package runs
    return plane


def test_provider_kubernetes_runs_with_the_poll_package_install_sets(installed, fleet_up) -> None:
    """package/install/provider-kubernetes.yaml reaches provider-kubernetes: its ImageConfig
    (with the mirror's path, as README says) selects the runtime config for the image Crossplane
    resolved, the Deployment made for the revision carries that config's arguments, and the
    controller runs with them. Read back from the API server, not from the files."""
    plane = fleet_up
    mgmt = plane.mgmt
    name = packages.installed_name(PROVIDER_KUBERNETES)
    configs = stack.install_docs("ImageConfig")
    (image_config,) = [
        c for c in configs.values() if c["spec"]["matchImages"][0]["prefix"] == PROVIDER_KUBERNETES
    ]
    config_name = image_config["spec"]["runtime"]["configRef"]["name"]
    wanted = stack.install_docs("DeploymentRuntimeConfig")[config_name]
    (container,) = wanted["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]["containers"]
    # what docs/sizing.md recommends: engines' Objects watch, every other Object polls each minute
    assert {"--enable-watches", "--poll=1m"} <= set(container["args"]), container

    live_config = mgmt.get(
        "pkg.crossplane.io/v1beta1", "ImageConfig", image_config["metadata"]["name"]
    )
    mirror = f"{installed.registry.host}/crossplane-contrib/provider-kubernetes"
    assert {"type": "Prefix", "prefix": mirror} in live_config["spec"]["matchImages"], live_config
    revision = mgmt.get(packages.PKG, "Provider", name)["status"]["currentRevision"]
    live.wait_for(lambda: revision in installed.runtime.local, 60, f"{name}'s runtime")
    assert installed.runtime.local[revision].runtime_config == config_name

    (deployment,) = _provider_deployments(mgmt, name)
    (running,) = deployment["spec"]["template"]["spec"]["containers"]
    (plane.dir / "logs" / "provider-kubernetes-args.txt").write_text(
        f"{running['name']} {running['image']}: {' '.join(running.get('args') or [])}\n"
    )
    assert running["name"] == packages.RUNTIME_CONTAINER
    assert running["image"] == f"{mirror}:{_dependency(PROVIDER_KUBERNETES)['version']}"
    assert running["args"] == container["args"], running
    # and the controller runs with exactly those (beside its probe address and debug logging)
    pid = plane.procs.running[packages.LOCAL_PROVIDER].pid
    cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    assert [a for a in cmdline if a.startswith("--poll")] == ["--poll=1m"], cmdline
    assert cmdline[1 : 1 + len(running["args"])] == running["args"], cmdline


def _dependency(package: str) -> dict:
    (dep,) = [d for d in packages.dependencies() if d["package"] == package]
    return dep


def _phase(obj: dict) -> str | None:
    return (obj.get("status") or {}).get("phase")


def _ready(obj: dict) -> bool:
    status = obj.get("status") or {}
    return status.get("phase") == "Ready" and bool(status.get("endpoint"))


def test_seed_workflow_run_reaches_ready_with_its_endpoint(fleet_up) -> None:
    """Seed 000's WorkflowRun, verbatim, on the fleet: the binder from the package commits its
    replicas, and the canary is smoke-tested against llama.cpp's llama-server."""
    plane = fleet_up
    seed = yaml.safe_load(SEED_RUN.read_text())
    name, namespace = seed["metadata"]["name"], seed["metadata"]["namespace"]
    plane.simulator.engines.llama_server()
    plane.simulator.engines.policy = lambda ns, replica: (
        engines.LLAMA_SERVER if ns == namespace else engines.FAST
    )
    plane.kubectl("apply", "-f", str(SEED_RUN))
    wr = live.wait_object(plane.mgmt, *WR, name, namespace, until=_ready, seconds=420)
    status = wr["status"]
    # the seed's form: a Service on port 8000 in the run's namespace, named after the run
    assert status["endpoint"] == f"{name.replace('.', '-')}.{namespace}.svc.cluster.local:8000"
    # and, for callers outside the cluster, the URL of the ModelService the run composed
    assert status["url"] == _service_url(plane, namespace, name), status
    replicas = plane.mgmt.list(*MR, namespace=namespace)
    assert replicas
    for replica in replicas:
        bound = live.condition(replica, "Bound") or {}
        assert bound.get("status") == "True", (replica["metadata"]["name"], bound)
        assert "plnt.work/binding" in replica["metadata"].get("annotations", {})
    _, rows = live.table(plane.kubectl("get", "workflowrun", "-n", namespace))
    assert rows[0][:4] == [name, "vllm", "nvidia.com/h100", "Ready"], rows


def test_seed_model_replica_binds_and_renders(fleet_up) -> None:
    """Seed 002's ModelReplica example, verbatim, with only what docs/model-replica.md says a
    hand-made replica needs: its namespace and the cluster it names (eks-l4, pool gpu-l4 of
    single-L4 nodes, as the example's required/ describes it)."""
    plane = fleet_up
    (cluster,) = kube.load_yaml(SEED_REPLICA / "required" / "inference-cluster-eks-l4.yaml")
    cluster.pop("status")  # what the example observed; the live one writes its own
    classes = kube.load_yaml(stack.REPO / "examples" / "fleet" / "classes-lab-l4.yaml")
    (l4,) = [c for c in classes if c["metadata"]["name"] == "nvidia-l4-1x"]
    (pool,) = cluster["spec"]["nodePools"]
    fleet.apply_existing_cluster(
        plane,
        cluster["metadata"]["name"],
        pool["nodeCount"],
        cluster,
        pool=pool["name"],
        cls=l4,
    )
    live.wait_ready(plane.mgmt, API, "InferenceCluster", cluster["metadata"]["name"], seconds=300)
    fleet.wait_in_view(plane, cluster["metadata"]["name"])
    (replica,) = kube.load_yaml(SEED_REPLICA / "xr.yaml")
    name, namespace = replica["metadata"]["name"], replica["metadata"]["namespace"]
    plane.kubectl("create", "namespace", namespace)
    plane.kubectl("apply", "-f", str(SEED_REPLICA / "xr.yaml"))
    bound = live.wait_object(
        plane.mgmt,
        *MR,
        name,
        namespace,
        until=lambda o: live.is_true(o, "Bound"),
        seconds=180,
        what=f"ModelReplica {namespace}/{name} Bound",
    )
    assert "eks-l4" in live.condition(bound, "Bound")["message"]

    # rendered: its engine's Deployment composed (the one labelled with the engine, beside the
    # endpoint picker's), and applied on the cluster it is pinned to
    def engine_object() -> dict | None:
        for obj in plane.mgmt.list(*OBJECT, namespace=namespace):
            manifest = obj["spec"]["forProvider"]["manifest"]
            owners = obj["metadata"].get("ownerReferences") or []
            engine = (manifest.get("metadata") or {}).get("labels", {}).get(labels.ENGINE)
            if (
                manifest.get("kind") == "Deployment"
                and engine
                and any(o["name"] == name for o in owners)
            ):
                return obj
        return None

    obj = live.wait_for(engine_object, 120, f"the Deployment Object of {name}")
    manifest = obj["spec"]["forProvider"]["manifest"]
    workload = plane.workloads[cluster["metadata"]["name"]]
    deployed = live.wait_for(
        lambda: workload.get("apps/v1", "Deployment", manifest["metadata"]["name"], namespace),
        120,
        "the engine Deployment on eks-l4",
    )
    selector = deployed["spec"]["template"]["spec"]["nodeSelector"]
    assert selector["modelplane.ai/pool"] == "gpu-l4", selector


# --- upgrading ---------------------------------------------------------------------------------

SECOND = "v0.1.1"
# The second build's changed function: function-inference-class (run from its image) words the
# Usable message of a class for Existing clusters differently.
USABLE_BEFORE = "not provisionable (Existing clusters only)"
USABLE_AFTER = "not provisionable (Existing clusters only; second build)"
CHANGED = {"functions/inference_class/fn.py": (f'"{USABLE_BEFORE}"', f'"{USABLE_AFTER}"')}


def _service_url(plane, namespace: str, run: str) -> str:
    """The URL of the ModelService the WorkflowRun composed (what its endpoint routes to)."""
    for service in plane.mgmt.list(API, "ModelService", namespace=namespace):
        owners = service["metadata"].get("ownerReferences") or []
        url = (service.get("status") or {}).get("url")
        if url and any(o.get("kind") == "WorkflowRun" and o["name"] == run for o in owners):
            return url
    raise AssertionError(f"no ModelService of WorkflowRun {run} has a URL")


class Prober(threading.Thread):
    """Streams a one-token chat completion to ``url`` every half second until stopped, each on a
    connection of its own (as independent callers do); ``answers`` holds each status code (0: no
    answer), ``failures`` when and why each request that got no 200 failed."""

    def __init__(self, url: str) -> None:
        super().__init__(name="plnt-e2e-prober", daemon=True)
        self.url = url.rstrip("/") + "/v1/chat/completions"
        self.answers: list[int] = []
        self.failures: list[tuple[float, str]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        body = {
            "model": "m",
            "stream": True,
            "max_tokens": 1,
            "messages": [{"role": "user", "content": "hello"}],
        }
        while not self.stopping.is_set():
            try:
                with httpx.Client(timeout=30) as client:
                    reply = client.post(self.url, json=body)
                self.answers.append(reply.status_code)
                if reply.status_code != 200:
                    self.failures.append((time.monotonic(), f"{reply.status_code} {reply.text}"))
            except httpx.TransportError as err:
                self.answers.append(0)
                self.failures.append((time.monotonic(), f"{type(err).__name__}: {err}"))
            self.stopping.wait(0.5)

    def stop(self) -> list[int]:
        self.stopping.set()
        self.join(60)
        return self.answers


def test_upgrade_to_a_second_build_keeps_the_workflow_run_serving(installed, fleet_up) -> None:
    """A second build of every plnt package (SECOND: every image differs, and one function's
    code), installed with README's upgrade command: Crossplane moves the Configuration and
    every plnt dependency to it, the runtime switches each function and the reconciler to its
    new revision, the changed function's answer shows on the XR it composes, and the seed
    WorkflowRun answers through its ModelService the whole time and stays Ready."""
    plane = fleet_up
    seed = yaml.safe_load(SEED_RUN.read_text())
    name, namespace = seed["metadata"]["name"], seed["metadata"]["namespace"]
    live.wait_object(plane.mgmt, *WR, name, namespace, until=_ready, seconds=60)
    plane.mgmt.apply(_l40s_class())

    def usable_message() -> str:
        cls = plane.mgmt.get(API, "InferenceClass", CLASS)
        return (live.condition(cls or {}, "Usable") or {}).get("message", "")

    live.wait_for(
        lambda: usable_message().endswith(USABLE_BEFORE), 120, f"{CLASS} Usable (first build)"
    )
    built = packages.build_second(SECOND, packages.DIST.parent / f"e2e-dist-{SECOND}", CHANGED)
    installed.publish(built, SECOND)
    prober = Prober(_service_url(plane, namespace, name))
    prober.start()
    watch = live.Watch(
        plane.mgmt, *WR, name, namespace, lambda o: (o.get("status") or {}).get("phase")
    )
    try:
        live.wait_for(lambda: 200 in prober.answers, 60, "the model to answer before")
        # what counts starts here, with the model answering: a first request may have waited on
        # a cold llama-server
        upgrade_from = len(prober.answers)
        started = time.monotonic()
        package = f"{packages.PLNT_REGISTRY}configuration-plnt:{SECOND}"
        proc = subprocess.run(
            [str(packages.CRANK), "xpkg", "update", "configuration", package,
             packages.configuration_name()],
            env={**os.environ, "KUBECONFIG": str(plane.kubeconfig)},
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        plnt_packages = [
            (dep["kind"], packages.installed_name(dep["package"]))
            for dep in packages.dependencies()
            if packages.is_plnt(dep["package"])
        ]

        def upgraded() -> bool:
            for kind, pkg in [("Configuration", packages.configuration_name()), *plnt_packages]:
                obj = plane.mgmt.get(packages.PKG, kind, pkg)
                if not (obj and obj["spec"]["package"].endswith(":" + SECOND)):
                    return False
                if not packages.healthy(obj):
                    return False
            return True

        live.wait_for(upgraded, 300, f"every plnt package at {SECOND}, Installed and Healthy")
        runtime = installed.runtime
        for kind, pkg in plnt_packages:
            current = plane.mgmt.get(packages.PKG, kind, pkg)["status"]["currentRevision"]
            if kind == "Function":
                live.wait_for(
                    lambda pkg=pkg, current=current: runtime.function_revisions.get(pkg) == current,
                    120,
                    f"{pkg}'s new revision served",
                )
            else:
                live.wait_for(
                    lambda current=current: current in runtime.providers, 120, f"{pkg} restarted"
                )
                assert runtime.providers[current].image.endswith(":" + SECOND)
                assert len(runtime.providers) == 1, runtime.providers  # the old one stopped
        upgrade_seconds = time.monotonic() - started
        (plane.dir / "logs" / "upgrade-seconds").write_text(f"{upgrade_seconds:.1f}\n")
        # the changed function composes the class now (within its TTL requeue)
        live.wait_for(
            lambda: usable_message().endswith(USABLE_AFTER), 120, f"{CLASS} Usable (second build)"
        )
        # the next binder pass, from the new reconciler, and a while of serving after it; the
        # run is Ready and Synced again once Crossplane has reconciled it through the new
        # functions (an upgrade may fail a reconcile while a new revision reports its
        # capabilities; the phase watch below says whether it ever left Ready)
        time.sleep(10)
        live.wait_object(
            plane.mgmt,
            *WR,
            name,
            namespace,
            until=lambda o: _ready(o) and live.is_true(o, "Synced"),
            seconds=120,
            what=f"WorkflowRun {name} Ready and Synced after the upgrade",
        )
    finally:
        answers = prober.stop()
        phases = watch.stop()
    during = answers[upgrade_from:]
    failures = [f"{at - started:+.1f} s: {why}" for at, why in prober.failures]
    assert len(during) >= 20 and set(during) == {200}, (answers, failures)
    assert set(phases) <= {"Ready"}, phases


# --- uninstalling ------------------------------------------------------------------------------


def test_uninstall_as_readme_says_leaves_nothing_of_plnt(fleet_up) -> None:
    """README's uninstall, step by step; then what is left on the control plane is listed
    (logs/uninstall-remains.txt) and must hold nothing of plnt's: no XR, XRD, Composition,
    package, CRD of a plnt or provider kind, Deployment, ServiceAccount or role of the install."""
    plane = fleet_up
    mgmt = plane.mgmt
    # the teams' kinds first, each gone only once what it composed is (foreground): their
    # Objects need the clusters' provider configs, which the InferenceClusters compose
    plane.kubectl(
        "delete", fleet.TEAM_KINDS, "--all", "-A", "--cascade=foreground", "--timeout=600s",
        timeout=630,
    )  # fmt: skip
    plane.kubectl("delete", "plnt", "--all", "-A", "--wait=false")
    live.wait_for(
        lambda: not plane.kubectl("get", "plnt", "-A", "-o", "name").strip(),
        300,
        "every plnt XR gone",
    )
    plane.kubectl("wait", "--for=delete", "managed", "--all", "-A", "--timeout=300s", timeout=330)
    assert not plane.kubectl("get", "managed", "-A", "-o", "name").strip()
    plane.kubectl("delete", "configuration", packages.configuration_name())
    installed = [
        (dep["kind"].lower(), packages.installed_name(dep["package"]))
        for dep in packages.dependencies()
    ]
    plane.kubectl("delete", *(f"{kind}/{name}" for kind, name in installed), "--wait=false")
    live.wait_for(
        lambda: not mgmt.list(packages.PKG, "Function") and not mgmt.list(packages.PKG, "Provider"),
        180,
        "every package gone",
    )
    plane.kubectl("delete", "-f", str(stack.INSTALL), "--wait=false")

    def leftovers() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for resource in (
            "customresourcedefinitions",
            "compositeresourcedefinitions",
            "compositions",
            "functions,providers,configurations",
            "deployments,serviceaccounts,secrets,configmaps",
            "clusterroles,clusterrolebindings,roles,rolebindings",
            "imageconfigs,deploymentruntimeconfigs",
            "namespaces",
        ):
            listed = plane.kubectl("get", resource, "-A", "-o", "name", check=False)
            out[resource] = sorted(line for line in listed.splitlines() if line.strip())
        return out

    def plnt_left() -> list[str]:
        marks = ("modelplane", "plnt", "kubernetes.m.crossplane.io", "helm.m.crossplane.io",
                 "coreweave")  # fmt: skip
        return [
            name
            for names in leftovers().values()
            for name in names
            if any(m in name for m in marks) and packages.IMAGE_CONFIG not in name
        ]

    remaining: list[str] = []

    def nothing_left() -> bool:
        remaining[:] = plnt_left()
        return not remaining

    try:
        live.wait_for(nothing_left, 180, "nothing of plnt left")
    except TimeoutError as err:
        raise AssertionError(f"{err}; still there: {remaining}") from None
    finally:
        remains = leftovers()
        (plane.dir / "logs" / "uninstall-remains.txt").write_text(
            "".join(f"{k}:\n" + "".join(f"  {n}\n" for n in v) for k, v in remains.items())
        )
