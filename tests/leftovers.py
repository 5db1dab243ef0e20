"""Processes a test run started that are still running when it ends (tests/conftest.py).

The process that runs the session (pytest itself, or the pytest-xdist controller) becomes a child
subreaper: a process whose parent ends is handed to it rather than to init, so everything the run
starts stays its descendant however it was started (a new session, a double fork, a killed
parent), and the xdist workers' leftovers become its own once the workers exit. Every process
also inherits ``PLNT_TEST_RUN`` (this run's token) from it, which names a leftover even where the
subreaper is not available. At the end, once the workers are gone, whatever is a descendant or
carries the token and is not a zombie is a leftover.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import pathlib
import signal
import sys
import time

RUN_MARKER = "PLNT_TEST_RUN"
# prctl(2): orphaned descendants are re-parented to the calling process.
PR_SET_CHILD_SUBREAPER = 36
# A process stopped at the end of the last test may still be exiting (its own children ending
# with it, a resource tracker reading the end of its pipe): it has this long before it counts.
EXIT_GRACE_S = 10.0
PROC = pathlib.Path("/proc")


@dataclasses.dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    state: str
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid} (parent {self.ppid}): {self.command}"


def start_run() -> str:
    """Marks this process's future descendants with a new token and adopts its orphans."""
    token = f"{os.getpid()}-{time.time_ns()}"
    os.environ[RUN_MARKER] = token
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    return token


def leftovers(token: str, grace_s: float = EXIT_GRACE_S) -> list[Process]:
    """The processes this run started that are still running after ``grace_s``."""
    deadline = time.monotonic() + grace_s
    while True:
        found = _running(token)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def stop(token: str, processes: list[Process]) -> None:
    """SIGKILL each by process id, so that a failed run leaves nothing behind either, and reap
    those that were handed to this process."""
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    leftovers(token, grace_s=5)


def children(pid: int) -> list[Process]:
    """The processes whose parent is ``pid``."""
    return [p for p in map(_read, _pids()) if p is not None and p.ppid == pid]


def running(pid: int) -> bool:
    """True while ``pid`` exists and has not ended (a zombie has)."""
    process = _read(pid)
    return process is not None and process.state != "Z"


def _running(token: str) -> list[Process]:
    me = os.getpid()
    table = {p.pid: p for p in map(_read, _pids()) if p is not None}
    children: dict[int, list[int]] = {}
    for process in table.values():
        children.setdefault(process.ppid, []).append(process.pid)
    descendants: set[int] = set()
    todo = [me]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in descendants:
                descendants.add(child)
                todo.append(child)
    marked = {pid for pid in table if pid not in descendants and _carries(pid, token)}
    out = []
    for pid in sorted(descendants | marked):
        process = table[pid]
        if process.state == "Z":  # ended; reaped here when it is this process's own child
            if process.ppid == me:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            continue
        out.append(process)
    return [p for p in out if p.pid != me]


def _pids() -> list[int]:
    return [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]


def _read(pid: int) -> Process | None:
    """/proc/PID/stat's state and parent, and the command line; None once it is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name (in parentheses) may hold spaces and parentheses itself
    state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    command = raw.replace(b"\0", b" ").decode(errors="replace").strip() or f"[{name}]"
    return Process(pid, int(ppid), state, command[:300])


def _carries(pid: int, token: str) -> bool:
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return f"{RUN_MARKER}={token}".encode() in environ.split(b"\0")
