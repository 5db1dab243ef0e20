"""`make preview`'s summary fits 100 columns: every line hack/preview.py prints, for the widest
real examples and for made-up worst cases (long names, many kinds, long errors)."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys
from types import ModuleType

REPO = pathlib.Path(__file__).resolve().parents[2]
WIDTH = 100


def _preview() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plnt_preview", REPO / "hack" / "preview.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _too_wide(lines: list[str]) -> list[str]:
    return [f"{len(line)}: {line}" for line in lines if len(line) > WIDTH]


def test_the_widest_examples_fit(tmp_path: pathlib.Path) -> None:
    # the examples whose summary was widest: long scenario names, the most composed kinds
    scenarios = [
        "workflowrun-phases/PullingWeights",
        "inference-cluster-ready",
        "workflowrun-invalid-update",
        "model-replica-ledger-unreadable",
        "model-service",
    ]
    run = subprocess.run(
        [sys.executable, str(REPO / "hack" / "preview.py"), "--out", str(tmp_path / "p.yaml")]
        + [str(REPO / "examples" / s) for s in scenarios],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert _too_wide(lines) == []
    for scenario in scenarios:
        (head,) = [line for line in lines if line.startswith(scenario + " ")]
        assert " Ready=" in head, head
    # every composed kind is still named, wrapped or not
    text = run.stdout
    for kind in ("ObservedObjectCollection", "ClusterProviderConfig", "BackendTLSPolicy"):
        assert kind in text, text
    assert "1 warning" in text  # model-replica-ledger-unreadable's


def test_made_up_worst_cases_fit() -> None:
    preview = _preview()
    xr = {"kind": "A" * 60, "status": {"conditions": [{"type": "Ready", "status": "False",
                                                        "reason": "R" * 80}]}}  # fmt: skip
    composed = [{"kind": f"Kind{i:02d}WithAVeryLongNameIndeed"} for i in range(40)]
    results = [{"kind": "Result", "severity": "Warning"}] * 3
    lines = preview.summary("s" * 120, [xr, *composed, *results])
    assert _too_wide(lines) == []
    assert len(lines) > 3  # wrapped, not cut: every kind is on some line
    assert all(f"Kind{i:02d}WithAVeryLongNameIndeed" in "\n".join(lines) for i in range(40))
    assert lines[0].endswith("...")  # a head wider than the screen is cut, and says so
    assert _too_wide(preview.failure("x" * 30, "Traceback...\n" + "error: " + "e" * 300)) == []


def test_a_short_example_stays_on_one_line() -> None:
    preview = _preview()
    xr = {"kind": "ModelCache", "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    lines = preview.summary("model-cache", [xr, {"kind": "Object"}, {"kind": "Object"}])
    assert lines == [f"{'model-cache':28} ModelCache Ready=True; 2 Object"]
