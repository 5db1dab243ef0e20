"""plnt functions run from their built images inside the live control plane's network namespace.

What Crossplane's package runtime does with a function pod, done with runc (tests/images/oci.py):
the image's rootfs read-only, Crossplane's pod user (2000:2000, not the image's 65532), the
server certificates at /tls/server named by TLS_SERVER_CERTS_DIR, and no network but the
namespace the stack lives in, so the function's port is one more loopback port there.

An image is either a file `make package` wrote (a function's .xpkg: its runtime image embedded)
or an image reference that `crane pull` fetches from the stack's loopback registry
(tests/e2e/packages.py: what the package manager resolved). Each distinct image is unpacked once
per working directory.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import threading

from tests.images import oci

POD_USER = (2000, 2000)  # the user Crossplane's package runtime runs function and provider pods as


def netns_path() -> str:
    """The calling thread's network namespace, by a path runc can open (the e2e stack's
    namespace belongs to the thread that entered it, and the threads it starts)."""
    return f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net"


@dataclasses.dataclass
class ImageFunction:
    name: str
    image: pathlib.Path
    running: oci.RunningFunction


class ImageFunctions:
    """Functions running from images, by name; stopped by container id (never by name)."""

    def __init__(self, workdir: pathlib.Path, log_dir: pathlib.Path) -> None:
        self.dir = workdir
        self.log_dir = log_dir
        self.running: dict[str, ImageFunction] = {}
        self._lock = threading.Lock()

    def start(
        self, name: str, image: pathlib.Path, certs: pathlib.Path, port: int
    ) -> oci.RunningFunction:
        """Starts ``name`` from ``image`` (an .xpkg or image tarball) listening on 127.0.0.1:port
        of the calling thread's namespace; returns once the runtime has started it (the caller
        waits for gRPC readiness)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            bundle = oci.unpack(image, self.dir)
        log = (self.log_dir / f"{name}.log").open("a")
        running = oci.start_function(
            bundle,
            cert_dir=certs,
            port=port,
            netns=netns_path(),
            workdir=self.dir,
            host="127.0.0.1",
            user=POD_USER,
            log=log,
        )
        with self._lock:
            self.running[name] = ImageFunction(name, image, running)
        return running

    def start_program(
        self,
        name: str,
        image: pathlib.Path,
        *,
        args: list[str] | None,
        env: list[str],
        files: dict[str, dict[str, pathlib.Path]],
        port: int,
    ) -> oci.RunningFunction:
        """Starts ``name`` from ``image`` as a package runtime runs a provider's container: the
        pod user, ``args`` instead of the image's command (when given), ``env`` and ``files``
        (tests/images/oci.py ``start``)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            bundle = oci.unpack(image, self.dir)
        log = (self.log_dir / f"{name}.log").open("a")
        running = oci.start(
            bundle,
            args=args,
            env=env,
            files=files,
            port=port,
            netns=netns_path(),
            workdir=self.dir,
            user=POD_USER,
            log=log,
        )
        with self._lock:
            self.running[name] = ImageFunction(name, image, running)
        return running

    def stop(self, name: str, *, kill: bool = False) -> None:
        with self._lock:
            fn = self.running.pop(name, None)
        if fn is None:
            return
        if kill:
            fn.running._runtime("kill", fn.running.container_id, "KILL")
        fn.running.stop()

    def stop_all(self) -> None:
        for name in reversed(list(self.running)):
            self.stop(name)


def pull(image_ref: str, out: pathlib.Path, crane: pathlib.Path) -> pathlib.Path:
    """``crane pull`` of one image from a registry (plain HTTP on 127.0.0.1) as a tarball."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.is_file():
        tmp = out.with_name(f".{out.name}.{os.getpid()}")
        proc = subprocess.run(
            [str(crane), "pull", "--platform", "linux/amd64", image_ref, str(tmp)],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"crane pull {image_ref}: {proc.stderr.strip()}")
        os.replace(tmp, out)
    return out
