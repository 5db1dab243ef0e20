"""Function servers as child processes on loopback: used by the benchmarks and the tests."""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

import grpc

PLNT = pathlib.Path(sys.executable).parent / "plnt"


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, never one this process handed out before: a port is
    free again as soon as its probe socket closes, so two servers started one after the other,
    each binding only once it runs, could otherwise be given the same one."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def wait_ready(
    address: str,
    proc: subprocess.Popen,
    timeout: float = 60.0,
    credentials: grpc.ChannelCredentials | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"function server on {address} exited with {proc.returncode}")
        channel = (
            grpc.secure_channel(address, credentials)
            if credentials
            else grpc.insecure_channel(address)
        )
        with channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=0.5)
                return
            except grpc.FutureTimeoutError:
                continue
    raise RuntimeError(f"function server on {address} did not become ready in {timeout}s")


def start(
    name: str,
    address: str,
    transport: Sequence[str] = ("--insecure",),
    log: pathlib.Path | None = None,
) -> subprocess.Popen:
    out = log.open("w") if log else subprocess.DEVNULL
    return subprocess.Popen(
        [str(PLNT), "function", name, *transport, "--address", address],
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def stop(procs: Sequence[subprocess.Popen]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def serving(
    name: str, transport: Sequence[str] = ("--insecure",), log: pathlib.Path | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """One function server; yields (address, process) once it accepts calls (insecure only)."""
    address = f"127.0.0.1:{free_port()}"
    proc = start(name, address, transport, log)
    try:
        if "--insecure" in transport:
            wait_ready(address, proc)
        yield address, proc
    finally:
        stop([proc])


def peak_rss_kib(pid: int) -> int:
    return _status_kib(pid, "VmHWM")


def _status_kib(pid: int, field: str) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)
