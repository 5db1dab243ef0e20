"""Run a plnt function from its built image under a real OCI runtime, as Crossplane's package
runtime runs a function pod's container: read-only root, the image's non-root user (65532), the
server certificates mounted at /tls/server with TLS_SERVER_CERTS_DIR naming them, gRPC on a port,
and no network but a private namespace's loopback.

The API, for any test (the e2e control plane included)::

    from tests.images import oci

    bundle = oci.unpack(pathlib.Path("dist/function-model-replica-v0.1.0.xpkg"), workdir)
    with oci.NetworkNamespace() as netns:            # or pass a namespace you already have
        fn = oci.start_function(bundle, cert_dir=certs, port=9443, netns=netns.path,
                                workdir=workdir)
        fn.wait_listening(timeout=60)                # its port is open inside netns
        ...                                          # call it from inside netns (netns.command)
        fn.stop()

- ``unpack(image, workdir) -> Bundle``: ``image`` is an .xpkg (what Crossplane's package manager
  pulls: the runtime image plus its package.yaml layer) or any docker-archive tarball
  (``make package`` writes both). Its blobs are laid out as an OCI image layout, digests
  unchanged, and ``umoci unpack`` (Debian's) makes the runtime bundle: ``rootfs/`` and the
  ``config.json`` it derives from the image config (entrypoint, command, user, environment).
- ``start_function(bundle, *, cert_dir, port, netns, workdir, runtime="runc", host="0.0.0.0",
  user=None, log=None) -> RunningFunction``: copies ``cert_dir``'s tls.crt, tls.key and ca.crt
  into a folder the container's user owns (as a Secret volume would be), writes the bundle's
  config.json for this run (read-only root, the certificate bind mount, TLS_SERVER_CERTS_DIR,
  ``--address host:port``, the network namespace at path ``netns``) and starts ``runc run`` (or
  ``crun run``) in the foreground. ``host`` is inside that private namespace, so 0.0.0.0 reaches
  only its loopback addresses (and any 127.0.0.x a hosts entry names). ``user`` overrides the
  image's (uid, gid): Crossplane's package runtime runs function pods as 2000:2000.
  ``tests.robustness.certs.make(dir, dns_names=[...])`` writes a matching cert_dir.
- ``start(bundle, *, args=None, env=(), files=None, port=0, netns, workdir, ...)``: any
  program of the image as a pod's container (the reconciler, with its ServiceAccount token
  mounted where in-cluster clients read it); ``start_function`` is this with the function's flags.
- ``RunningFunction``: ``process`` (the runtime's Popen; it forwards signals to the container),
  ``container_id``, ``pid()`` (the function's own process id, as the host sees it),
  ``wait_listening(timeout)``, ``stop()`` (SIGTERM through the runtime, then ``delete --force``
  of this container id only).
- ``NetworkNamespace``: a private network namespace with loopback up, held by one ``unshare``
  process (bounded lifetime) and stopped by its pid; ``path`` is /proc/<pid>/ns/net and
  ``command(argv)`` prefixes ``nsenter --net=<path>`` so a client runs inside it.

Needs root (runc, unshare, nsenter); ``hack/install-image-tools.sh`` installs runc and umoci.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import tarfile
import time
import uuid
from collections.abc import Sequence
from typing import IO, Any

CERTS_IN_CONTAINER = "/tls/server"  # Crossplane's TLSServerCertsDir
CERTS_ENV = "TLS_SERVER_CERTS_DIR"
CERT_FILES = ("tls.crt", "tls.key", "ca.crt")
NAMESPACE_LIFETIME_SECONDS = 1800  # the holder exits by itself even if a test never stops it


@dataclasses.dataclass(frozen=True)
class Bundle:
    """An unpacked image: an OCI runtime bundle (rootfs/ and config.json)."""

    path: pathlib.Path
    image: pathlib.Path

    @property
    def rootfs(self) -> pathlib.Path:
        return self.path / "rootfs"

    def config(self) -> dict[str, Any]:
        return json.loads((self.path / "image-config.json").read_text())


def unpack(image: pathlib.Path, workdir: pathlib.Path) -> Bundle:
    """The image tarball as a runtime bundle under ``workdir`` (see the module docstring)."""
    key = hashlib.sha256(image.read_bytes()).hexdigest()[:16]
    layout = workdir / f"oci-{key}"
    bundle = workdir / f"bundle-{key}"
    if not (bundle / "image-config.json").is_file():
        shutil.rmtree(layout, ignore_errors=True)
        shutil.rmtree(bundle, ignore_errors=True)
        _oci_layout(image, layout)
        _run("umoci", "unpack", "--image", f"{layout}:image", bundle)
        # Keep the config umoci derived: every start writes config.json afresh from it.
        shutil.copy(bundle / "config.json", bundle / "image-config.json")
    return Bundle(path=bundle, image=image)


def image_config(image: pathlib.Path) -> dict[str, Any]:
    """The image's config (``Entrypoint``, ``Cmd``, ``User``, ...) from a docker-archive: what a
    pod's ``args`` replace (the command) and keep (the entrypoint)."""
    with tarfile.open(image) as archive:
        (entry,) = json.load(archive.extractfile("manifest.json"))
        return json.load(archive.extractfile(entry["Config"]))["config"]


def _oci_layout(image: pathlib.Path, layout: pathlib.Path) -> None:
    """A docker-archive (docker save's manifest.json; crank's .xpkg is one) as an OCI image
    layout tagged ``image``: the same blobs, the same digests, nothing recompressed."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    with tarfile.open(image) as archive:
        (entry,) = json.load(archive.extractfile("manifest.json"))

        def put(member: str) -> tuple[str, int]:
            data = archive.extractfile(member).read()
            digest = hashlib.sha256(data).hexdigest()
            (blobs / digest).write_bytes(data)
            return f"sha256:{digest}", len(data)

        config_digest, config_size = put(entry["Config"])
        layers = []
        for member in entry["Layers"]:
            digest, size = put(member)
            with archive.extractfile(member) as f:
                gzipped = f.read(2) == b"\x1f\x8b"
            media = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gzipped else "")
            layers.append({"mediaType": media, "digest": digest, "size": size})
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config_size,
            },
            "layers": layers,
        }
    ).encode()
    manifest_digest = hashlib.sha256(manifest).hexdigest()
    (blobs / manifest_digest).write_bytes(manifest)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": f"sha256:{manifest_digest}",
                "size": len(manifest),
                "annotations": {"org.opencontainers.image.ref.name": "image"},
            }
        ],
    }
    (layout / "index.json").write_text(json.dumps(index))


class NetworkNamespace:
    """A private network namespace with loopback up; see the module docstring."""

    def __init__(self) -> None:
        self.holder: subprocess.Popen | None = None

    @property
    def path(self) -> str:
        assert self.holder is not None, "not started"
        return f"/proc/{self.holder.pid}/ns/net"

    def start(self) -> NetworkNamespace:
        self.holder = subprocess.Popen(
            [
                "unshare",
                "--net",
                "sh",
                "-c",
                f"ip link set lo up && echo up && exec sleep {NAMESPACE_LIFETIME_SECONDS}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.holder.stdout.readline().strip() != "up":
            self.stop()
            raise RuntimeError("could not bring loopback up in a new network namespace")
        return self

    def command(self, argv: Sequence[str | os.PathLike]) -> list[str]:
        return ["nsenter", f"--net={self.path}", *map(str, argv)]

    def stop(self) -> None:
        if self.holder is not None and self.holder.poll() is None:
            self.holder.terminate()
            self.holder.wait(timeout=10)

    def __enter__(self) -> NetworkNamespace:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


@dataclasses.dataclass
class RunningFunction:
    process: subprocess.Popen
    container_id: str
    runtime: str
    state_root: pathlib.Path
    netns: str
    port: int

    def _runtime(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.runtime, "--root", str(self.state_root), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )

    def pid(self) -> int:
        """The function's process id as the host sees it (the container's init)."""
        state = self._runtime("state", self.container_id)
        if state.returncode != 0:
            raise RuntimeError(f"{self.runtime} state {self.container_id}: {state.stderr}")
        return int(json.loads(state.stdout)["pid"])

    def wait_listening(self, timeout: float = 60.0) -> None:
        """Until the function's port is open inside the namespace (its own /proc/net/tcp*)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the container exited with {self.process.returncode}")
            with contextlib.suppress(RuntimeError, OSError):
                if _listening(self.pid(), self.port):
                    return
            time.sleep(0.2)
        raise RuntimeError(f"nothing listened on port {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # runc run forwards SIGTERM to the function
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._runtime("kill", self.container_id, "KILL")
                self.process.wait(timeout=15)
        self._runtime("delete", "--force", self.container_id)


def _listening(pid: int, port: int) -> bool:
    want = f":{port:04X}"
    for table in ("tcp", "tcp6"):
        path = pathlib.Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1].endswith(want) and fields[3] == "0A":  # 0A: LISTEN
                return True
    return False


def start_function(
    bundle: Bundle,
    *,
    cert_dir: pathlib.Path,
    port: int,
    netns: str,
    workdir: pathlib.Path,
    runtime: str = "runc",
    host: str = "0.0.0.0",
    user: tuple[int, int] | None = None,
    log: IO[str] | None = None,
) -> RunningFunction:
    """Starts the bundle's function under ``runtime``; see the module docstring."""
    config = bundle.config()
    args = [*config["process"]["args"], "--address", f"{host}:{port}"]
    return start(
        bundle,
        args=args,
        env=[f"{CERTS_ENV}={CERTS_IN_CONTAINER}"],
        files={CERTS_IN_CONTAINER: {name: cert_dir / name for name in CERT_FILES}},
        port=port,
        netns=netns,
        workdir=workdir,
        runtime=runtime,
        user=user,
        log=log,
    )


def start(
    bundle: Bundle,
    *,
    args: Sequence[str] | None = None,
    env: Sequence[str] = (),
    files: dict[str, dict[str, pathlib.Path]] | None = None,
    port: int = 0,
    netns: str,
    workdir: pathlib.Path,
    runtime: str = "runc",
    user: tuple[int, int] | None = None,
    log: IO[str] | None = None,
) -> RunningFunction:
    """Starts any program of the bundle under ``runtime``, as a pod's container: ``args`` replace
    the image's entrypoint and command when given (the image's otherwise), ``env`` is added to
    the image's, and each ``files`` entry (a path in the container: {name: file}) is copied into
    a folder the container's user owns and mounted read-only there, as a Secret volume is.
    ``port`` is what ``wait_listening`` waits for."""
    config = bundle.config()
    if user is not None:
        config["process"]["user"] = {"uid": user[0], "gid": user[1]}
    uid, gid = config["process"]["user"]["uid"], config["process"]["user"]["gid"]
    container_id = f"plnt-{uuid.uuid4().hex[:12]}"
    mounts = []
    for i, (destination, contents) in enumerate((files or {}).items()):
        folder = workdir / f"files-{container_id}-{i}"
        folder.mkdir(parents=True)
        for name, source in contents.items():
            shutil.copy(source, folder / name)
            os.chown(folder / name, uid, gid)
            (folder / name).chmod(0o400)
        os.chown(folder, uid, gid)
        folder.chmod(0o500)
        mounts.append(
            {
                "destination": destination,
                "type": "bind",
                "source": str(folder),
                "options": ["rbind", "ro", "nosuid", "nodev", "noexec"],
            }
        )

    process = config["process"]
    process["terminal"] = False
    if args is not None:
        process["args"] = list(args)
    process["env"] = [*process["env"], *env]
    config["root"] = {"path": str(bundle.rootfs), "readonly": True}
    config["hostname"] = container_id
    config["mounts"] = [*config["mounts"], *mounts]
    namespaces = [ns for ns in config["linux"]["namespaces"] if ns["type"] != "network"]
    config["linux"]["namespaces"] = [*namespaces, {"type": "network", "path": netns}]
    # One bundle may run several containers: each run gets its own config.json folder.
    run_dir = workdir / f"run-{container_id}"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(config, indent=2))
    state_root = workdir / f"{runtime}-state"
    state_root.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [runtime, "--root", str(state_root), "run", "--bundle", str(run_dir), container_id],
        stdin=subprocess.DEVNULL,
        stdout=log or subprocess.DEVNULL,
        stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
    )
    return RunningFunction(
        process=proc,
        container_id=container_id,
        runtime=runtime,
        state_root=state_root,
        netns=netns,
        port=port,
    )


def _run(*cmd: str | os.PathLike) -> None:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, check=False, timeout=600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: {proc.stdout}{proc.stderr}")
