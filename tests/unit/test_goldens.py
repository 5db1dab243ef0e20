"""Every example renders exactly as its golden render in tests/golden/ says, whole documents; a
difference fails with the unified diff and the command that rewrites the files."""

from __future__ import annotations

import difflib
import pathlib

import pytest

from tests import goldens

REGENERATE = "make goldens (python -m tests.goldens)"


@pytest.mark.parametrize("folder", goldens.scenarios(), ids=goldens.label)
def test_render_matches_golden(folder: pathlib.Path) -> None:
    path = goldens.golden(folder)
    shown = path.relative_to(goldens.ROOT)
    assert path.exists(), f"{shown} is missing: run {REGENERATE}"
    want, got = path.read_text(), goldens.rendered(folder)
    if got != want:
        diff = difflib.unified_diff(
            want.splitlines(keepends=True),
            got.splitlines(keepends=True),
            fromfile=str(shown),
            tofile=f"plnt render --tree -r examples/{goldens.label(folder)}",
            n=3,
        )
        pytest.fail(f"the render changed; if that is intended, run {REGENERATE}\n" + "".join(diff))


def test_every_golden_has_its_scenario() -> None:
    # a golden left behind by a removed or renamed example would pin nothing
    expected = {goldens.golden(f) for f in goldens.scenarios()}
    found = goldens.GOLDEN.rglob("*.yaml")
    orphans = sorted(str(p.relative_to(goldens.ROOT)) for p in found if p not in expected)
    assert orphans == []


def test_every_example_renders() -> None:
    # a failing scenario would be pinned as its error text; every example is meant to render
    failed = [
        goldens.label(f)
        for f in goldens.scenarios()
        if goldens.golden(f).read_text().startswith("# exit ")
    ]
    assert failed == []
