"""The whole-response tables' files: each is a registered case's (tests/functions/tables.py)."""

from __future__ import annotations

from tests.functions import tables


def test_every_response_file_has_its_case() -> None:
    # a want file left behind by a removed or renamed case would pin nothing
    expected = {t.want_file(c) for t in tables.registered() for c in t.cases}
    found = tables.RESPONSES.rglob("*.yaml")
    orphans = sorted(str(p.relative_to(tables.ROOT)) for p in found if p not in expected)
    assert orphans == []
