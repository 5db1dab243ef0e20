"""Build and run the Go oracle (tests/oracle): Kubernetes' DRA CEL on a list of cases.

The binary goes to .tools/oracle and is rebuilt only when a source file changed (a hash
stamp beside it). A file lock keeps parallel pytest workers from building twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests" / "oracle"
TOOLS = REPO / ".tools"
BINARY = TOOLS / "oracle"
STAMP = TOOLS / "oracle.stamp"


def _source_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(SOURCE.iterdir()):
        if path.is_file() and (path.suffix == ".go" or path.name in ("go.mod", "go.sum")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def build_oracle() -> Path:
    """Path to an up-to-date oracle binary, building it with `go build` if needed."""
    TOOLS.mkdir(exist_ok=True)
    wanted = _source_hash()
    with open(TOOLS / "oracle.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if BINARY.exists() and STAMP.exists() and STAMP.read_text() == wanted:
            return BINARY
        env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0"}
        result = subprocess.run(
            [shutil.which("go") or "/usr/local/go/bin/go", "build", "-o", str(BINARY), "."],
            cwd=SOURCE,
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if result.returncode != 0:
            raise RuntimeError(f"go build of the oracle failed:\n{result.stderr}")
        STAMP.write_text(wanted)
    return BINARY


def run_oracle(binary: Path, cases: list[dict]) -> dict[str, dict]:
    """{case id: {"result": "match"|"nomatch"|"error", "message": ...}}."""
    result = subprocess.run(
        [str(binary)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    outcomes = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return {o["id"]: o for o in outcomes}


def load_corpus() -> list[dict]:
    """The corpus with each case's device inlined, as the oracle reads it."""
    corpus = json.loads((Path(__file__).with_name("corpus.json")).read_text(encoding="utf-8"))
    devices = corpus["devices"]
    return [
        {
            "id": c["id"],
            "expression": c["expression"],
            "device": devices[c["device"]],
            "knownDivergence": c.get("knownDivergence", ""),
        }
        for c in corpus["cases"]
    ]


def ours(expression: str, device: dict) -> tuple[str, str]:
    """Our evaluator's outcome in the oracle's words."""
    from plnt import cel

    result = cel.matches(expression, device)
    if isinstance(result, cel.CelError):
        return "error", result.reason
    return ("match" if result else "nomatch"), ""


def diff_table(cases: list[dict], oracle: dict[str, dict]) -> list[str]:
    """One line per unexpected outcome: a disagreement, or a known divergence that agrees."""
    rows = []
    for case in cases:
        theirs = oracle[case["id"]]
        mine, message = ours(case["expression"], case["device"])
        if (mine != theirs["result"]) != bool(case.get("knownDivergence")):
            expr = case["expression"]
            expr = expr if len(expr) < 90 else expr[:87] + "..."
            known = "known divergence that now agrees: " if case.get("knownDivergence") else ""
            rows.append(
                f"{known}{case['id']:>6} | k8s={theirs['result']:<7} ours={mine:<7} | {expr}"
                f" | k8s: {theirs.get('message', '')[:80]!r} ours: {message[:80]!r}"
            )
    return rows
