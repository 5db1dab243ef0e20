"""Every import points down: the host loads functions, functions use the library; the reconciler
is a program apart that uses the library, and neither the functions nor the library use it."""

from __future__ import annotations

import ast
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
# package -> the packages it must never import
BELOW = {
    "plnt": ("functions", "plnt_host", "plnt_reconciler"),
    "functions": ("plnt_host", "plnt_reconciler"),
    "plnt_reconciler": ("functions", "plnt_host"),
}


def _imported(path: pathlib.Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


@pytest.mark.parametrize("package", sorted(BELOW))
def test_no_import_runs_back_up(package: str) -> None:
    upward = [
        f"{path.relative_to(REPO)}: {name}"
        for path in sorted((REPO / package).rglob("*.py"))
        for name in sorted(_imported(path))
        if name.split(".")[0] in BELOW[package]
    ]
    assert upward == []


def test_capacity_is_pure() -> None:
    """The scheduler and the binder share plnt.capacity (admission, quotas, the ledger model, the
    commit decision, the fleet view), so it needs neither the reconciler nor the Kubernetes client
    that function images leave out."""
    impure = [
        f"{path.relative_to(REPO)}: {name}"
        for path in sorted((REPO / "plnt" / "capacity").rglob("*.py"))
        for name in sorted(_imported(path))
        if name.split(".")[0] == "kubernetes" or name.startswith("plnt_reconciler")
    ]
    for module in ("admission", "quotas", "tenant", "ledger", "commit", "binding", "offer"):
        assert (REPO / "plnt" / "capacity" / f"{module}.py").exists()
    assert impure == []
