"""The cross-function status contract: its readers, and that it is spelled once."""

from __future__ import annotations

import ast
import pathlib

import pytest

from plnt import conditions, contracts

REPO = pathlib.Path(__file__).resolve().parents[2]

PASSED = {"revision": "r1", "run": "run-a", "verdict": "Pass", "state": "Measured"}


@pytest.mark.parametrize(
    ("candidates", "want"),
    [
        ((PASSED,), PASSED),
        ((None, {"not": "a verdict"}, PASSED), PASSED),  # the first verdict that fits wins
        (({**PASSED, "verdict": "Fail"}, PASSED), {**PASSED, "verdict": "Fail"}),
        (({**PASSED, "revision": "r0"},), None),  # another revision's
        (({**PASSED, "run": "run-b"},), None),  # another run's
        (({k: v for k, v in PASSED.items() if k != "run"},), None),  # belongs to no run
        (({**PASSED, "verdict": None, "state": "Waiting"},), None),  # no verdict yet
        (("Pass", ["Pass"], 7), None),
    ],
)
def test_verdict_on_takes_the_first_verdict_on_the_revision_in_the_run(
    candidates: tuple[object, ...], want: dict | None
) -> None:
    assert contracts.verdict_on("r1", "run-a", *candidates) == want


def test_a_verdict_without_a_run_counts_when_there_is_no_run() -> None:
    unrun = {"revision": "r1", "verdict": "Fail"}
    assert contracts.verdict_on("r1", None, unrun) == unrun


def test_malformed_status_reads_as_absent_never_raises() -> None:
    assert contracts.Gate.of("Pass") == contracts.Gate(raw={})
    gate = contracts.Gate.of({"revision": 3, "state": ["Measuring"], "verdict": "Pass"})
    assert (gate.revision, gate.state, gate.passed) == (None, None, True)
    for status in (None, "x", {"revisions": "r1"}, {"revisions": {"stable": 1, "canary": ""}}):
        revisions = contracts.Revisions.of({"status": status})
        assert (revisions.stable, revisions.canary) == (None, None)
    got = contracts.Revisions.of({"status": {"revisions": {"stable": "a", "canary": "b"}}})
    assert (got.stable, got.canary) == ("a", "b")
    assert contracts.gate_in({"status": {"canary": "x"}}) is None
    assert contracts.CanaryStatus.of({"status": {"canary": {"run": "r", "gate": PASSED}}}) == (
        contracts.CanaryStatus(run="r", gate=contracts.Gate.of(PASSED))
    )


def _code_strings(path: pathlib.Path) -> list[tuple[int, str]]:
    """String constants in code, not in docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_the_contract_is_spelled_once() -> None:
    """The group, the context key and the gate's verdict state live in plnt/contracts.py, the
    Canary reasons in plnt/conditions.py; every writer and reader names them from there."""
    home = {
        contracts.MODELPLANE_API_VERSION: "contracts.py",
        contracts.MODELPLANE_VERSION: "contracts.py",
        contracts.VERDICT_CONTEXT: "contracts.py",
        contracts.MEASURED: "contracts.py",
        conditions.AWAITING_VERDICT: "conditions.py",
        conditions.PROMOTED: "conditions.py",
    }
    found = [
        f"{path.relative_to(REPO)}:{line}: {value!r}"
        for root in ("plnt", "functions")
        for path in sorted((REPO / root).rglob("*.py"))
        for line, value in _code_strings(path)
        if value in home and path.name != home[value]
    ]
    assert found == []
