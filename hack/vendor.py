"""Refresh or check the vendored third-party files in third_party/ (CRDs and seeds).

``python hack/vendor.py refresh [SRC]`` copies SRC/crds and SRC/seeds (default: the shared
folder beside the checkout) into third_party/ and rewrites third_party/SOURCES with each
file's sha256; ``check`` verifies that the
vendored files are exactly those SOURCES lists. Where each CRD comes from upstream (repository,
path, commit) is in third_party/crds/SOURCES.md, copied with them.
"""

from __future__ import annotations

import hashlib
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
VENDOR = ROOT / "third_party"
SOURCES = VENDOR / "SOURCES"
DIRS = ("crds", "seeds")
ORIGIN = "/work/shared (the project's shared folder: crds/ and seeds/)"


def digest(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(base: pathlib.Path) -> dict[str, str]:
    """Relative path -> sha256 for every file under base's vendored folders."""
    return {
        str(p.relative_to(base)): digest(p)
        for d in DIRS
        for p in sorted((base / d).rglob("*"))
        if p.is_file()
    }


def recorded(sources: pathlib.Path = SOURCES) -> dict[str, str]:
    """Relative path -> sha256, as SOURCES pins them."""
    out = {}
    for line in sources.read_text().splitlines():
        if line and not line.startswith("#"):
            sha, name = line.split(maxsplit=1)
            out[name] = sha
    return out


def mismatches(base: pathlib.Path = VENDOR) -> list[str]:
    """Every file under base's vendored folders, or listed in its SOURCES, whose sha256 differs
    from the pin (missing on either side counts)."""
    have, want = tree(base), recorded(base / "SOURCES")
    return sorted(n for n in have.keys() | want.keys() if have.get(n) != want.get(n))


def refresh(src: pathlib.Path) -> None:
    for d in DIRS:
        shutil.rmtree(VENDOR / d, ignore_errors=True)
        shutil.copytree(src / d, VENDOR / d)
    lines = [f"# origin: {ORIGIN}", "# sha256  path (relative to third_party/)"]
    lines += [f"{sha}  {name}" for name, sha in tree(VENDOR).items()]
    SOURCES.write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "check"
    if cmd == "refresh":
        refresh(pathlib.Path(argv[1]) if len(argv) > 1 else ROOT.parent / "shared")
        return 0
    if cmd == "check":
        bad = mismatches(VENDOR)
        for n in bad:
            sys.stderr.write(f"third_party/{n}: does not match SOURCES\n")
        return 1 if bad else 0
    sys.stderr.write("usage: hack/vendor.py refresh [SRC] | check\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
