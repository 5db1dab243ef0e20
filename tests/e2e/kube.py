"""Real Kubernetes pieces for the live control plane: etcd, kube-apiserver, kube-controller-manager,
and a small REST client for them.

Everything binds 127.0.0.1 (inside the e2e network namespace). Each API server serves a
certificate the test CA signs, so every client verifies it the way it would in production;
authentication is by static bearer tokens (a throwaway server on loopback).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pathlib
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import httpx
import yaml

from tests.reconcile.apiserver import ETCD, INSTALL_ETCD, KUBE_VERSION, TOOLS, free_port
from tests.robustness import certs

KUBE_APISERVER = TOOLS / "kube-apiserver"
KUBE_CONTROLLER_MANAGER = TOOLS / "kube-controller-manager"
KUBECTL = TOOLS / "kubectl"


# What the canary gate measures (the engines' latency) runs at this niceness in the stack, and the
# gate's client with it: on a real fleet neither shares its CPU with etcd, the API servers and
# Crossplane, and here, on 2 cores beside them, a fast engine measured a p95 TTFT of 392 ms on
# one of 10 prompts (p50 34 ms) against the seed's 250 ms budget. Raising it needs root (we are).
LATENCY_NICE = -5


class Processes:
    """Child processes, each logging to a file; stopped by process id, newest first."""

    def __init__(self, log_dir: pathlib.Path) -> None:
        self.log_dir = log_dir
        self.running: dict[str, subprocess.Popen] = {}

    def start(
        self,
        name: str,
        argv: list[str],
        env: Mapping[str, str] | None = None,
        *,
        nice: int | None = None,
    ) -> subprocess.Popen:
        """``nice``: the child's niceness, set as it starts (long before a plnt server has
        imported enough to serve, or to start the workers that inherit it). Each child has a
        session of its own, so a terminal's Ctrl-C reaches only the program that started it,
        which stops its children by process id (`make dev`)."""
        log = (self.log_dir / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env else None,
            start_new_session=True,
        )
        if nice is not None:
            os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
        self.running[name] = proc
        return proc

    def stop(self, name: str, *, kill: bool = False) -> None:
        proc = self.running.pop(name, None)
        if proc is None:
            return
        if kill:
            proc.kill()
        else:
            proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop_all(self) -> None:
        for name in reversed(list(self.running)):
            self.stop(name)

    def exited(self) -> list[str]:
        return [n for n, p in self.running.items() if p.poll() is not None]

    def tail(self, name: str, chars: int = 3000) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.is_file() else ""


def missing_binaries() -> list[str]:
    gaps = [str(b) for b in (KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBECTL) if not b.is_file()]
    if not ETCD.is_file():
        gaps.append(f"{ETCD} (built by hack/{INSTALL_ETCD.name})")
    return gaps


@dataclasses.dataclass
class CA:
    """The test CA: signs every server and client certificate of the stack."""

    pair: certs.Pair
    key: Any
    cert: Any

    @classmethod
    def make(cls) -> CA:
        pair, key, cert = certs.ca("plnt-e2e-ca")
        return cls(pair, key, cert)

    def server(self, cn: str, *hosts: str) -> certs.Pair:
        return certs.leaf(self.key, self.cert, cn, server=True, hosts=hosts or ("127.0.0.1",))

    def client(self, cn: str) -> certs.Pair:
        return certs.leaf(self.key, self.cert, cn, server=False)

    def write_dir(self, directory: pathlib.Path, pair: certs.Pair) -> pathlib.Path:
        """tls.crt, tls.key and ca.crt, the layout Crossplane and plnt functions read."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "tls.crt").write_bytes(pair.cert)
        (directory / "tls.key").write_bytes(pair.key)
        (directory / "ca.crt").write_bytes(self.pair.cert)
        return directory


class APIServer:
    """etcd + kube-apiserver on loopback, serving a certificate the test CA signs."""

    def __init__(
        self,
        name: str,
        workdir: pathlib.Path,
        procs: Processes,
        ca: CA,
        tokens: Mapping[str, tuple[str, str]],
        extra_args: Sequence[str] = (),
    ) -> None:
        """``tokens``: token -> (user, group); the first is the admin this client uses.
        ``extra_args``: more kube-apiserver flags (an audit log, for a benchmark)."""
        self.name = name
        self.dir = workdir
        self.procs = procs
        self.ca = ca
        self.tokens = dict(tokens)
        self.admin_token = next(iter(self.tokens))
        workdir.mkdir(parents=True, exist_ok=True)
        client, peer, secure = free_port(), free_port(), free_port()
        self.port = secure
        self.url = f"https://127.0.0.1:{secure}"
        self._etcd_argv = [
            str(ETCD),
            f"--data-dir={workdir / 'etcd'}",
            f"--name={name}",
            f"--listen-client-urls=http://127.0.0.1:{client}",
            f"--advertise-client-urls=http://127.0.0.1:{client}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster={name}=http://127.0.0.1:{peer}",
            "--quota-backend-bytes=4294967296",
        ]
        procs.start(f"{name}-etcd", self._etcd_argv)
        serving = ca.server(f"{name}-apiserver", "127.0.0.1", "localhost")
        (workdir / "serving.crt").write_bytes(serving.cert)
        (workdir / "serving.key").write_bytes(serving.key)
        (workdir / "ca.crt").write_bytes(ca.pair.cert)
        sa_key = workdir / "sa.key"
        sa_key.write_bytes(_rsa_key())
        token_file = workdir / "tokens.csv"
        token_file.write_text(
            "".join(
                f'{token},{user},{user}-uid,"{group}"\n' for token, (user, group) in tokens.items()
            )
        )
        self._apiserver_argv = [
            str(KUBE_APISERVER),
            f"--etcd-servers=http://127.0.0.1:{client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",
            f"--secure-port={secure}",
            f"--tls-cert-file={workdir / 'serving.crt'}",
            f"--tls-private-key-file={workdir / 'serving.key'}",
            f"--client-ca-file={workdir / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            f"--token-auth-file={token_file}",
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--enable-priority-and-fairness=false",
            *extra_args,
        ]
        procs.start(f"{name}-apiserver", self._apiserver_argv)
        self.http = httpx.Client(
            base_url=self.url,
            verify=ssl.create_default_context(cafile=str(workdir / "ca.crt")),
            timeout=30,
            headers={"Authorization": f"Bearer {self.admin_token}"},
        )
        self._plurals: dict[tuple[str, str], tuple[str, bool]] = {}
        self.wait_ready()

    # --- lifecycle --------------------------------------------------------------------------

    def wait_ready(self, seconds: float = 90) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            dead = [n for n in self.procs.exited() if n.startswith(self.name)]
            if dead:
                raise RuntimeError(f"{dead} exited:\n{self.procs.tail(dead[0])}")
            try:
                if self.http.get("/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"{self.name} API server not ready after {seconds}s")

    def stop(self) -> None:
        """Stops kube-apiserver, then etcd (SIGTERM: as an operator's restart would)."""
        self.procs.stop(f"{self.name}-apiserver")
        self.procs.stop(f"{self.name}-etcd")

    def start(self, seconds: float = 90) -> None:
        """Starts etcd and kube-apiserver again, on the same data directory, ports and
        certificates, and waits until the API server is ready."""
        self.procs.start(f"{self.name}-etcd", self._etcd_argv)
        self.procs.start(f"{self.name}-apiserver", self._apiserver_argv)
        self.wait_ready(seconds)

    def kubeconfig(self, path: pathlib.Path, token: str | None = None) -> pathlib.Path:
        path.write_text(yaml.safe_dump(self.kubeconfig_doc(token)))
        return path

    def kubeconfig_doc(self, token: str | None = None, *, with_ca: bool = True) -> dict[str, Any]:
        cluster: dict[str, Any] = {"server": self.url}
        if with_ca:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca.pair.cert).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": self.name,
            "clusters": [{"name": self.name, "cluster": cluster}],
            "users": [{"name": self.name, "user": {"token": token or self.admin_token}}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": self.name}}],
        }

    # --- REST -------------------------------------------------------------------------------

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) from discovery, refreshed on a miss (new CRDs appear)."""
        key = (api_version, kind)
        if key not in self._plurals:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            r = self.http.get(base)
            if r.status_code == 200:
                for res in r.json().get("resources", []):
                    if "/" not in res["name"]:
                        self._plurals[(api_version, res["kind"])] = (
                            res["name"],
                            res["namespaced"],
                        )
            if key not in self._plurals:
                raise LookupError(f"{self.name}: no resource {kind} in {api_version}")
        return self._plurals[key]

    def path(
        self, api_version: str, kind: str, name: str | None = None, namespace: str | None = None
    ) -> str:
        plural, namespaced = self._resource(api_version, kind)
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        if namespaced and namespace:
            base += f"/namespaces/{namespace}"
        out = f"{base}/{plural}"
        return f"{out}/{name}" if name else out

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        r = self.http.get(self.path(api_version, kind, name, namespace))
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        try:
            path = self.path(api_version, kind, namespace=namespace)
        except LookupError:
            return []
        params = {}
        if labels:
            params["labelSelector"] = ",".join(f"{k}={v}" for k, v in labels.items())
        r = self.http.get(path, params=params)
        if r.status_code == 404:
            return []
        r.raise_for_status()
        items = r.json().get("items", [])
        for item in items:  # list items carry no type; callers patch them by it
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def apply(self, obj: Mapping[str, Any], manager: str = "plnt-e2e") -> dict[str, Any]:
        """Server-side apply, forcing ownership (the test is the author of what it applies)."""
        meta = obj["metadata"]
        r = self.http.patch(
            self.path(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")),
            params={"fieldManager": manager, "force": "true"},
            headers={"Content-Type": "application/apply-patch+yaml"},
            content=json.dumps(obj),
        )
        if r.status_code >= 400:
            raise RuntimeError(f"{self.name}: apply {obj['kind']} {meta['name']}: {r.text}")
        return r.json()

    def patch_status(
        self,
        obj: Mapping[str, Any],
        status: Mapping[str, Any],
        manager: str = "plnt-e2e-simulator",
    ) -> dict[str, Any] | None:
        """Merge-patches the status subresource; None if the object is gone."""
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        r = self.http.patch(
            f"{path}/status",
            params={"fieldManager": manager},
            headers={"Content-Type": "application/merge-patch+json"},
            content=json.dumps({"status": status}),
        )
        if r.status_code == 404:
            return None
        if r.status_code >= 400:
            raise RuntimeError(f"{self.name}: status of {obj['kind']} {meta['name']}: {r.text}")
        return r.json()

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        r = self.http.delete(self.path(api_version, kind, name, namespace))
        if r.status_code not in (200, 202, 404):
            r.raise_for_status()

    def create_crds(self, docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            self.apply(doc)
        for doc in docs:
            self.wait_established(doc["metadata"]["name"])

    def wait_established(self, crd: str, seconds: float = 60) -> None:
        def established() -> bool:
            obj = self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd) or {}
            conds = (obj.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

        wait_for(established, seconds, f"CRD {crd} established on {self.name}")

        # Established comes before discovery lists the kind: a lookup in between misses it.
        obj = self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd) or {}
        spec = obj.get("spec") or {}
        plural = (spec.get("names") or {}).get("plural")
        served = [v["name"] for v in spec.get("versions", []) if v.get("served")]

        def discovered() -> bool:
            for version in served:
                r = self.http.get(f"/apis/{spec['group']}/{version}")
                if r.status_code != 200:
                    return False
                if plural not in {res["name"] for res in r.json().get("resources", [])}:
                    return False
            return True

        wait_for(discovered, seconds, f"CRD {crd} in discovery on {self.name}")
        self._plurals.clear()


def kubectl(
    kubeconfig: pathlib.Path,
    *args: str,
    check: bool = True,
    stdin: str | None = None,
    timeout: float = 120,
) -> str:
    """Runs the real kubectl against a kubeconfig; returns stdout (stderr in the error)."""
    proc = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def controller_manager(
    name: str, procs: Processes, kubeconfig: pathlib.Path, controllers: str
) -> subprocess.Popen:
    """kube-controller-manager running only ``controllers`` (no serving port, no election)."""
    return procs.start(
        f"{name}-controller-manager",
        [
            str(KUBE_CONTROLLER_MANAGER),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--controllers={controllers}",
            "--leader-elect=false",
            "--secure-port=0",
            "--use-service-account-credentials=false",
            "--concurrent-gc-syncs=10",
        ],
    )


def wait_for(check: Callable[[], Any], seconds: float, what: str, interval: float = 0.5) -> Any:
    """Polls ``check`` until it returns something truthy; fails naming ``what``."""
    deadline = time.monotonic() + seconds
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {seconds:.0f}s waiting for {what} (last: {last!r})")


def load_yaml(path: pathlib.Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def iter_yaml_files(directory: pathlib.Path) -> Iterator[pathlib.Path]:
    yield from sorted(directory.glob("*.yaml"))


def _rsa_key() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


__all__ = ["CA", "KUBE_VERSION", "APIServer", "Processes", "kubectl", "wait_for"]
