"""`make dev` ends cleanly: Ctrl-C in the terminal stops every process the
stack started, by process id, and prints one line, no traceback.

The stack is started exactly as `make dev` starts it (`python -m tests.e2e.stack`, the fleet
included: the workload cluster's kube-scheduler, kwok and the LeaderWorkerSet controller) in a
process group of its own, as a shell runs a foreground job; the test then sends SIGINT to that
whole group, as the terminal does on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import time

from tests.e2e.stack import REPO

UP = "plnt control plane up"
BANNER_END = "apply -f examples/workflowrun-llama-70b/xr.yaml"  # the last line the stack prints up


FLEET_PROGRAMS = {"kube-scheduler", "kwok", "lws-manager"}  # what only the fleet starts


def _program(pid: int) -> str:
    """The executable's file name of process ``pid`` ('' once it is gone)."""
    try:
        argv0 = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return ""
    return pathlib.Path(argv0.decode(errors="replace")).name


def _ours(workdir: pathlib.Path) -> list[int]:
    """Processes whose command line names the stack's working directory (etcd, the API
    servers, Crossplane, the providers and functions all take a path in it)."""
    out = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(workdir) in cmdline and int(proc.name) != os.getpid():
            out.append(int(proc.name))
    return out


def test_ctrl_c_stops_everything_with_one_line(tmp_path: pathlib.Path) -> None:
    workdir = tmp_path / "dev"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.stack", "--dir", str(workdir)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a foreground job's process group
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 600  # the control plane, then the fleet Ready
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if BANNER_END in line:
                break
        assert any(UP in line for line in lines), "\n".join(lines)
        running = _ours(workdir)
        assert len(running) >= 10, running  # the whole stack, not just the launcher
        programs = {_program(pid) for pid in running}
        assert programs >= FLEET_PROGRAMS, sorted(programs)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # a failed check: the stack still stops what it started
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for pid in _ours(workdir):  # and whatever it could not, by process id
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    after = [line for line in rest.splitlines() if line.strip()]
    assert proc.returncode == 0, rest
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest
    assert len(after) == 1 and after[0].startswith("plnt control plane stopped ("), after
    time.sleep(1)
    left = {pid: _program(pid) for pid in _ours(workdir)}
    assert left == {}, f"left running after Ctrl-C: {left}"
