"""A private network namespace for the live control plane.

Crossplane core and provider-kubernetes bind their metrics and health ports on every interface,
and kube-apiserver looks for a default route. Inside a network namespace of our own nothing is
reachable from outside, so every server of the e2e stack runs in one: only `lo`, which also
carries TEST-NET-1 addresses (192.0.2.0/24, RFC 5737) standing in for gateway addresses
(ModelService refuses loopback backends, as it must in a real cluster).

`enter()` moves the *calling thread* into a new namespace (unshare(2) with CLONE_NEWNET applies
to the calling task only); every process it starts afterwards inherits it. pytest runs the e2e
tests on one worker's main thread, so that thread and everything it starts live in the
namespace until `leave()` puts the thread back where it was: the same worker goes on to run other
tests, whose servers need the host's namespace (kube-apiserver looks for a default route there).
Sockets opened inside keep working after the thread leaves. `python -m tests.e2e.stack` does the
same for `make dev`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess

CLONE_NEWNET = 0x40000000
GATEWAY_NET = "192.0.2"  # TEST-NET-1: documentation addresses, never routed anywhere

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_home: int | None = None  # the thread's own namespace, held open while it is away
_depth = 0  # how many stacks entered it: a second stack (tests/e2e/packages.py) shares it


def enter() -> None:
    """Unshare the network namespace once, bring `lo` up, add the gateway addresses to it."""
    global _home, _depth  # noqa: PLW0603 (one namespace per thread, entered once)
    if _home is not None:
        _depth += 1
        return
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    if _libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        os.close(home)
        raise OSError(err, f"unshare(CLONE_NEWNET) failed: {os.strerror(err)} (needs root)")
    _home = home
    _depth = 1
    _ip("link", "set", "lo", "up")
    for host in range(1, 32):
        _ip("addr", "add", f"{GATEWAY_NET}.{host}/32", "dev", "lo")


def leave() -> None:
    """Put the calling thread back in the namespace it had before `enter()`, once the last
    stack that entered it leaves."""
    global _home, _depth  # noqa: PLW0603
    _depth = max(0, _depth - 1)
    if _home is None or _depth:
        return
    if _libc.setns(_home, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns back to the host network failed: {os.strerror(err)}")
    os.close(_home)
    _home = None


def add_address(address: str) -> None:
    """Put ``address`` on `lo` (a Service's cluster IP the service proxy stand-in answers on);
    call it from a thread inside the namespace."""
    _ip("addr", "replace", f"{address}/32", "dev", "lo")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def interfaces() -> list[str]:
    """The interfaces this thread sees (for the test that proves the stack is isolated)."""
    out = subprocess.run(["ip", "-o", "link"], check=True, capture_output=True, text=True).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
