"""llama.cpp's own `llama-server` on loopback, serving the tiny generated GGUF.

The binary is built once by hack/install-llama-server.sh (from llama.cpp as vendored in PyPI's
llama-cpp-python sdist) and cached under .tools/bin; the test set-up (hack/setup-test.sh) runs
that script, so a test that finds no binary fails and says how to build it.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import time
from collections.abc import Iterator

import httpx

from plnt_host import procs, render

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # hack/install-llama-server.sh builds this version
BINARY = render.REPO_ROOT / ".tools" / "bin" / f"llama-server-{LLAMA_CPP_PYTHON_VERSION}"
MODEL_ALIAS = "tiny"


def binary() -> pathlib.Path:
    if not os.access(BINARY, os.X_OK):
        raise RuntimeError(f"{BINARY} is missing: run hack/install-llama-server.sh (or make test)")
    return BINARY


@contextlib.contextmanager
def serving(
    model: pathlib.Path,
    *,
    slots: int = 4,
    context_per_slot: int = 4096,
    threads: int = 1,
    log: pathlib.Path | None = None,
    nice: int | None = None,
) -> Iterator[str]:
    """Start llama-server on 127.0.0.1; yields its base URL once /health answers 200.

    One thread: a token then takes a few milliseconds, well above this machine's noise, and the
    other core stays free for the measuring clients. ``nice``: its niceness. Stopped by its
    process id."""
    port = procs.free_port()
    args = [
        str(binary()),
        "--model",
        str(model),
        "--alias",
        MODEL_ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ctx-size",
        str(slots * context_per_slot),
        "--parallel",
        str(slots),
        "--threads",
        str(threads),
        "--threads-batch",
        str(threads),
    ]
    out = log.open("w") if log else subprocess.DEVNULL
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    if nice is not None:  # ahead of a busy stack on the CPU, as the e2e engines are
        os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"llama-server on {url} was not healthy within {timeout_s:g} s")
