"""A real Kubernetes API server on loopback: etcd and kube-apiserver, both built from the Go
module proxy (go.etcd.io/etcd/server/v3 and k8s.io/kubernetes), with RBAC on and static bearer
tokens for two users: an admin and the reconciler's ServiceAccount, which gets only
package/install/reconciler-rbac.yaml and binder-tenancy.yaml.

    python -m tests.reconcile.apiserver --install   # build etcd and kube-apiserver, once

The builds take a few minutes on two cores (most of it the first download); the binaries go
to .tools/bin/etcd and .tools/bin/kube-apiserver.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import httpx
import yaml

from plnt_host import procs

REPO = pathlib.Path(__file__).resolve().parents[2]
TOOLS = REPO / ".tools" / "bin"
KUBE_VERSION = os.environ.get("PLNT_KUBE_VERSION", "v1.37.2")
KUBE_APISERVER = TOOLS / "kube-apiserver"
# The etcd every API server of the tests and `make dev` runs on: hack/install-etcd.sh builds it
# (its version is set there). Kubernetes' API server wants etcd 3.5 or newer; Debian's 3.4 lacks
# the watch progress requests its streaming watch-lists need. PLNT_ETCD names another etcd
# binary, to compare versions (tests/e2e/replica_start.py).
ETCD = pathlib.Path(os.environ.get("PLNT_ETCD") or TOOLS / "etcd")
INSTALL_ETCD = REPO / "hack" / "install-etcd.sh"
CRD = pathlib.Path(__file__).resolve().parent / "modeldeployment-crd.yaml"
RBAC = REPO / "package" / "install" / "reconciler-rbac.yaml"
TENANCY_RBAC = REPO / "package" / "install" / "binder-tenancy.yaml"  # the binder's tenancy reads
ADMIN_TOKEN = "plnt-test-admin"  # loopback-only test credentials for a throwaway server
RECONCILER_TOKEN = "plnt-test-reconciler"
# The ServiceAccount Crossplane's package runtime runs the plnt-reconciler package as
# (package/install/settings.yaml names it; Crossplane's namespace holds it).
RECONCILER_NAMESPACE = "crossplane-system"
RECONCILER_USER = f"system:serviceaccount:{RECONCILER_NAMESPACE}:plnt-reconciler"


free_port = procs.free_port  # never the same port twice in one test process


def service_account_key() -> bytes:
    """A fresh RSA key (PEM) for signing and verifying ServiceAccount tokens."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def missing() -> list[str]:
    """What a real API server needs that is not installed."""
    gaps = []
    if not ETCD.is_file():
        gaps.append(f"{ETCD} (built from go.etcd.io/etcd/server/v3 by {INSTALL_ETCD.name})")
    if not KUBE_APISERVER.is_file():
        gaps.append(f"{KUBE_APISERVER} (built from k8s.io/kubernetes {KUBE_VERSION})")
    return gaps


# The Kubernetes binaries the tests run, all built from one k8s.io/kubernetes module so the Go
# build cache is shared: kube-apiserver (reconciler and e2e tests), kube-controller-manager
# (the e2e control plane's garbage collector and namespace controller), kube-scheduler (binds
# the e2e workload clusters' pods and allocates their DRA ResourceClaims) and kubectl (the e2e
# tests drive the live control plane with it, as users do).
KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


def install() -> None:
    """Build etcd and the Kubernetes binaries from the Go module proxy, once per version."""
    subprocess.run([str(INSTALL_ETCD)], check=True)
    wanted = [
        b
        for b in KUBE_BINARIES
        if not ((TOOLS / b).is_file() and (TOOLS / f".{b}-{KUBE_VERSION}").is_file())
    ]
    if not wanted:
        return
    TOOLS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with local
    # folders the module zip does not carry; pin each to the matching published v0.x release.
    with tempfile.TemporaryDirectory() as work:
        env = {**os.environ, "GOFLAGS": "-mod=mod"}
        info = subprocess.run(
            ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{KUBE_VERSION}"],
            capture_output=True,
            text=True,
            check=True,
            cwd=work,
            env=env,
        )
        gomod = pathlib.Path(json.loads(info.stdout)["GoMod"]).read_text()
        staging = sorted(
            {line.split()[0] for line in gomod.splitlines() if "=> ./staging/" in line}
        )
        minor = "v0." + KUBE_VERSION.split(".", 1)[1]
        replaces = "\n".join(f"\t{m} => {m} {minor}" for m in staging)
        (pathlib.Path(work) / "go.mod").write_text(
            f"module plntkas\n\ngo 1.26\n\nrequire k8s.io/kubernetes {KUBE_VERSION}\n\n"
            f"replace (\n{replaces}\n)\n"
        )
        imports = "".join(
            f'\t_ "k8s.io/kubernetes/cmd/{b}/app"\n' for b in KUBE_BINARIES if b != "kubectl"
        )
        (pathlib.Path(work) / "main.go").write_text(
            f'package main\n\nimport (\n{imports}\t_ "k8s.io/kubectl/pkg/cmd"\n)\n\n'
            "func main() {}\n"
        )
        subprocess.run(["go", "mod", "tidy"], check=True, cwd=work, env=env)
        for binary in wanted:
            print(f"building {binary} {KUBE_VERSION} into {TOOLS} ...", file=sys.stderr)
            subprocess.run(
                [
                    "go",
                    "build",
                    "-trimpath",
                    "-ldflags",
                    "-s -w",
                    "-o",
                    str(TOOLS / binary),
                    f"k8s.io/kubernetes/cmd/{binary}",
                ],
                check=True,
                cwd=work,
                env=env,
            )
            for old in TOOLS.glob(f".{binary}-*"):
                old.unlink()
            (TOOLS / f".{binary}-{KUBE_VERSION}").touch()
    print(f"built {', '.join(wanted)} in {time.monotonic() - started:.0f} s", file=sys.stderr)


class APIServer:
    """etcd + kube-apiserver in a temp dir, ready, with the ModelDeployment CRD and RBAC
    (``reconciler_fixtures=False``: a bare server, for tests that install their own CRDs)."""

    def __init__(self, workdir: pathlib.Path, *, reconciler_fixtures: bool = True) -> None:
        gaps = missing()
        if gaps:
            raise RuntimeError(
                "a real API server needs "
                + ", ".join(gaps)
                + ": run `.venv/bin/python -m tests.reconcile.apiserver --install`"
            )
        self.dir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []
        self.reconciler_fixtures = reconciler_fixtures
        try:
            self._boot(workdir)
        except BaseException:
            self.close()
            raise

    def _boot(self, workdir: pathlib.Path) -> None:
        client, peer, secure = free_port(), free_port(), free_port()
        self.url = f"https://127.0.0.1:{secure}"
        self._start(
            "etcd",
            [
                str(ETCD),
                f"--data-dir={workdir / 'etcd'}",
                "--name=default",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
            ],
        )
        key = workdir / "sa.key"
        key.write_bytes(service_account_key())
        tokens = workdir / "tokens.csv"
        tokens.write_text(
            f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n'
            f"{RECONCILER_TOKEN},{RECONCILER_USER},reconciler-uid,"
            f'"system:serviceaccounts,system:serviceaccounts:{RECONCILER_NAMESPACE},'
            'system:authenticated"\n'
        )
        self._start(
            "kube-apiserver",
            [
                str(KUBE_APISERVER),
                f"--etcd-servers=http://127.0.0.1:{client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",  # no default route needed
                "--endpoint-reconciler-type=none",
                f"--secure-port={secure}",
                f"--cert-dir={workdir / 'certs'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={key}",
                f"--service-account-signing-key-file={key}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.96.0.0/24",
            ],
        )
        self.wait_ready()
        self.admin = httpx.Client(
            base_url=self.url,
            verify=False,
            timeout=10,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        if not self.reconciler_fixtures:
            return
        for doc in yaml.safe_load_all(CRD.read_text()):
            self.create(doc)
        self.wait_established("modeldeployments.modelplane.ai")
        for path in (RBAC, TENANCY_RBAC):
            for doc in yaml.safe_load_all(path.read_text()):
                self.create(doc)

    def _start(self, name: str, argv: list[str]) -> None:
        log = (self.dir / f"{name}.log").open("wb")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))

    def _log_tail(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.dir.glob("*.log"))
        )

    def wait_ready(self, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"API server exited:\n{self._log_tail()}")
            try:
                r = httpx.get(
                    f"{self.url}/readyz",
                    verify=False,
                    timeout=2,
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                )
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"API server not ready after {seconds}s:\n{self._log_tail()}")

    def wait_established(self, crd: str, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}"
        while time.monotonic() < deadline:
            conditions = (self.admin.get(path).json().get("status") or {}).get("conditions") or []
            established = any(
                c["type"] == "Established" and c["status"] == "True" for c in conditions
            )
            # discovery of the new group lags the condition a little
            group = crd.split(".", 1)[1]
            if established and self.admin.get(f"/apis/{group}/v1alpha1").status_code == 200:
                return
            time.sleep(0.25)
        raise TimeoutError(f"{crd} not established")

    def path_for(self, obj: dict) -> str:
        group_version, kind = obj["apiVersion"], obj["kind"]
        plural = {
            "Namespace": "namespaces",
            "ServiceAccount": "serviceaccounts",
            "ClusterRole": "clusterroles",
            "ClusterRoleBinding": "clusterrolebindings",
            "Role": "roles",
            "RoleBinding": "rolebindings",
            "ConfigMap": "configmaps",
            "Secret": "secrets",
            "InferenceCluster": "inferenceclusters",
            "InferenceClass": "inferenceclasses",
            "InferenceQuota": "inferencequotas",
            "ModelReplica": "modelreplicas",
            "CustomResourceDefinition": "customresourcedefinitions",
            "ModelDeployment": "modeldeployments",
        }[kind]
        base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        namespace = obj.get("metadata", {}).get("namespace")
        return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"

    def create(self, obj: dict) -> dict:
        r = self.admin.post(self.path_for(obj), json=obj)
        if r.status_code == 409 and obj["kind"] == "Namespace":
            return r.json()
        assert r.status_code in (200, 201), r.text
        return r.json()

    def kubeconfig(self, path: pathlib.Path, token: str) -> pathlib.Path:
        ca = (self.dir / "certs" / "apiserver.crt").read_text()
        import base64

        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "test",
                    "clusters": [
                        {
                            "name": "test",
                            "cluster": {
                                "server": self.url,
                                "certificate-authority-data": base64.b64encode(
                                    ca.encode()
                                ).decode(),
                            },
                        }
                    ],
                    "users": [{"name": "test", "user": {"token": token}}],
                    "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
                }
            )
        )
        return path

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    if sys.argv[1:] != ["--install"]:
        sys.exit(__doc__)
    install()
