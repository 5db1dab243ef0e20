"""The vendored third-party files (third_party/crds, third_party/seeds) are what
third_party/SOURCES pins, checked inside the repository so any clone can fail it.

Refresh with `make vendor` (hack/vendor.py refresh), which rewrites SOURCES too.
"""

from __future__ import annotations

import importlib.util
import pathlib
import shutil
import sys
from types import ModuleType

REPO = pathlib.Path(__file__).resolve().parents[2]


def _vendor() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plnt_vendor", REPO / "hack" / "vendor.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_vendored_files_match_sources() -> None:
    vendor = _vendor()
    pinned = vendor.recorded()
    assert vendor.mismatches() == []
    assert set(vendor.tree(vendor.VENDOR)) == set(pinned)
    assert any(n.startswith("crds/") and n.endswith(".yaml") for n in pinned)
    assert sorted(n for n in pinned if n.startswith("seeds/")) == [
        "seeds/000_f3acac39ca5a15ce.txt",
        "seeds/002_8410d7b68d6a9c8a.txt",
        "seeds/004_19ec7491fca60bc5.txt",
    ]
    assert all(len(sha) == 64 for sha in pinned.values())


def test_a_changed_missing_or_unlisted_file_is_named(tmp_path: pathlib.Path) -> None:
    """The same check on a copy: what a bad clone or a hand edit looks like to it."""
    vendor = _vendor()
    copy = tmp_path / "third_party"
    shutil.copytree(vendor.VENDOR, copy)
    assert vendor.mismatches(copy) == []
    seed = copy / "seeds" / "000_f3acac39ca5a15ce.txt"
    seed.write_bytes(seed.read_bytes() + b"\n")
    (copy / "crds" / "gateway.networking.k8s.io_gateways.yaml").unlink()
    (copy / "crds" / "extra.yaml").write_text("kind: Nothing\n")
    assert vendor.mismatches(copy) == [
        "crds/extra.yaml",
        "crds/gateway.networking.k8s.io_gateways.yaml",
        "seeds/000_f3acac39ca5a15ce.txt",
    ]


def test_no_test_or_tool_reads_outside_the_checkout() -> None:
    needle = "/".join(("..", "shared"))
    offenders = [
        str(p.relative_to(REPO))
        for d in ("tests", "plnt", "plnt_host", "hack", "functions")
        for p in (REPO / d).rglob("*")
        if p.suffix in {".py", ".sh"} and needle in p.read_text(errors="replace")
    ]
    assert offenders == []
