"""A private network namespace for the live control plane.

Crossplane core and provider-kubernetes bind their metrics and health ports on every interface,
and kube-apiserver looks for a default route. Inside a network namespace of our own nothing is
reachable from outside, so every server of the e2e stack runs in one: only `lo`, which also
carries TEST-NET-1 addresses (192.0.2.0/24, RFC 5737) standing in for gateway addresses
(ModelService refuses loopback backends, as it must in a real cluster).

`enter()` moves the *calling thread* into a new namespace (unshare(2) with CLONE_NEWNET applies
to the calling task only); every process it starts afterwards inherits it. pytest runs the e2e
tests on one worker's main thread, so that thread and everything it starts live in the
namespace. `python -m tests.e2e.stack` does the same for `make dev`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess

CLONE_NEWNET = 0x40000000
GATEWAY_NET = "192.0.2"  # TEST-NET-1: documentation addresses, never routed anywhere

_entered = False


def enter() -> None:
    """Unshare the network namespace once, bring `lo` up, add the gateway addresses to it."""
    global _entered  # noqa: PLW0603 (one namespace per process, entered once)
    if _entered:
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNET) failed: {os.strerror(err)} (needs root)")
    _ip("link", "set", "lo", "up")
    for host in range(1, 32):
        _ip("addr", "add", f"{GATEWAY_NET}.{host}/32", "dev", "lo")
    _entered = True


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def interfaces() -> list[str]:
    """The interfaces this thread sees (for the test that proves the stack is isolated)."""
    out = subprocess.run(["ip", "-o", "link"], check=True, capture_output=True, text=True).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
