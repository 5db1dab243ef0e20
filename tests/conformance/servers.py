"""Every plnt function served over gRPC on a free loopback port, as `crossplane render` calls it."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator

import yaml

from plnt_host import procs, runtime

free_port = procs.free_port
wait_ready = procs.wait_ready


def functions_manifest(addresses: dict[str, str]) -> str:
    """Function objects pointing `crossplane render` at already-running servers."""
    docs = []
    for name, address in sorted(addresses.items()):
        docs.append(
            {
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": "Function",
                "metadata": {
                    "name": runtime.INSTALLED_PREFIX + name,
                    "annotations": {
                        "render.crossplane.io/runtime": "Development",
                        "render.crossplane.io/runtime-development-target": address,
                    },
                },
                "spec": {"package": f"xpkg.crossplane.io/plnt/{name}:v0.1.0"},
            }
        )
    return yaml.safe_dump_all(docs, explicit_start=True)


@contextlib.contextmanager
def serve_all(log_dir: pathlib.Path) -> Iterator[dict[str, str]]:
    """Starts `plnt function NAME --insecure` for every function; yields name -> address."""
    started = []
    addresses: dict[str, str] = {}
    try:
        for name in runtime.function_names():
            address = f"127.0.0.1:{procs.free_port()}"
            started.append(procs.start(name, address, log=log_dir / f"{name}.log"))
            addresses[name] = address
        for proc, address in zip(started, addresses.values(), strict=True):
            procs.wait_ready(address, proc)
        yield addresses
    finally:
        procs.stop(started)
