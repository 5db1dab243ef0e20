"""Build and run the Go oracle (tests/oracle): Kubernetes' DRA CEL on a list of cases.

The binary goes to .tools/oracle and is rebuilt only when a source file changed
(tests/gobuild.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.gobuild import REPO, TOOLS, build_cached

SOURCE = REPO / "tests" / "oracle"
BINARY = TOOLS / "oracle"


def build_oracle() -> Path:
    """Path to an up-to-date oracle binary, building it with `go build` if needed."""
    return build_cached(SOURCE, "oracle")


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
