"""The vendored third-party files (third_party/crds, third_party/seeds) are what SOURCES pins.

Refresh with `make vendor` (hack/vendor.py refresh), which rewrites SOURCES too.
"""

from __future__ import annotations

import importlib.util
import pathlib
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
    have, want = vendor.tree(vendor.VENDOR), vendor.recorded()
    assert have == want
    assert any(n.startswith("crds/") and n.endswith(".yaml") for n in have)
    assert any(n.startswith("seeds/") for n in have)


def test_vendored_files_match_the_shared_folder_when_there_is_one() -> None:
    vendor = _vendor()
    shared = REPO.parent / "shared"
    if not (shared / "crds").is_dir():
        return  # a clone on its own: SOURCES is the pin (checked above)
    assert vendor.tree(shared) == vendor.tree(vendor.VENDOR), "run `make vendor`"


def test_no_test_or_tool_reads_outside_the_checkout() -> None:
    needle = "/".join(("..", "shared"))
    offenders = [
        str(p.relative_to(REPO))
        for d in ("tests", "plnt", "plnt_host", "hack", "functions")
        for p in (REPO / d).rglob("*")
        if p.suffix in {".py", ".sh"} and needle in p.read_text(errors="replace")
    ]
    assert offenders == []
