"""Go programs the tests run (the DRA CEL oracle, the Kubernetes validator), built once.

Each binary goes to .tools/<name> and is rebuilt only when one of its sources changed (a hash
stamp beside it), so a test session pays for `go build` only after an edit. A file lock keeps
parallel pytest workers, and hack/setup-test.sh beside them, from building the same binary
twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / ".tools"


def source_hash(source: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(source.iterdir()):
        if path.is_file() and (path.suffix == ".go" or path.name in ("go.mod", "go.sum")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def build_cached(source: Path, name: str, timeout: float = 900) -> Path:
    """Path to an up-to-date build of the Go main package in SOURCE; raises with Go's output."""
    TOOLS.mkdir(exist_ok=True)
    binary, stamp = TOOLS / name, TOOLS / f"{name}.stamp"
    wanted = source_hash(source)
    with open(TOOLS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists() and stamp.exists() and stamp.read_text() == wanted:
            return binary
        env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0"}
        result = subprocess.run(
            [shutil.which("go") or "/usr/local/go/bin/go", "build", "-o", str(binary), "."],
            cwd=source,
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise RuntimeError(f"go build of {source} failed:\n{result.stderr}")
        stamp.write_text(wanted)
    return binary
