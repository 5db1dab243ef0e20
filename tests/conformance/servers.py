"""Every plnt function served over gRPC on a free loopback port, as `crossplane render` reaches them."""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import grpc
import yaml

from plnt import runtime

REPO = pathlib.Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(address: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"function server on {address} exited with {proc.returncode}")
        with grpc.insecure_channel(address) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=0.5)
                return
            except grpc.FutureTimeoutError:
                continue
    raise RuntimeError(f"function server on {address} did not become ready in {timeout}s")


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
    procs: list[subprocess.Popen] = []
    addresses: dict[str, str] = {}
    plnt = pathlib.Path(sys.executable).parent / "plnt"
    try:
        for name in runtime.function_names():
            address = f"127.0.0.1:{free_port()}"
            log = (log_dir / f"{name}.log").open("w")
            procs.append(
                subprocess.Popen(
                    [str(plnt), "function", name, "--insecure", "--address", address],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
            )
            addresses[name] = address
        for proc, address in zip(procs, addresses.values(), strict=True):
            wait_ready(address, proc)
        yield addresses
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
