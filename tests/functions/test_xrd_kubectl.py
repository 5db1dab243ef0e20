"""What `kubectl get` shows for every plnt kind: one shared category, and no column twice.

Crossplane appends its own columns to the CRD it generates from each XRD (SYNCED, READY,
COMPOSITION, COMPOSITIONREVISION, AGE: ``CompositeResourcePrinterColumns`` in
crossplane/crossplane ``internal/xcrd/schemas.go``, v2.2.1 and v2.3.0 alike), and kubectl
prints column names upper-cased, so an XRD column named ``Ready`` shows as a second READY.
tests/conformance/test_kubectl_apiserver.py shows the same on a real kube-apiserver.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
XRDS = sorted(REPO.glob("apis/*/definition.yaml"))
CATEGORY = "plnt"
CROSSPLANE_COLUMNS = ("SYNCED", "READY", "COMPOSITION", "COMPOSITIONREVISION", "AGE")


def _xrd(path: pathlib.Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_every_kind_is_in_the_plnt_category() -> None:
    assert len(XRDS) == 11  # InferenceGrant is the eleventh
    kinds = {_xrd(p)["spec"]["names"]["kind"]: _xrd(p)["spec"]["names"] for p in XRDS}
    assert {k for k, names in kinds.items() if CATEGORY not in names.get("categories", [])} == set()


@pytest.mark.parametrize("path", XRDS, ids=[p.parent.name for p in XRDS])
def test_no_column_repeats_what_crossplane_appends(path: pathlib.Path) -> None:
    for version in _xrd(path)["spec"]["versions"]:
        shown = [c["name"].upper() for c in version.get("additionalPrinterColumns", [])]
        shown += CROSSPLANE_COLUMNS
        assert sorted(n for n in set(shown) if shown.count(n) > 1) == []
