"""`plnt validate`: plnt's XRDs and Compositions, and any XRs, checked by the real Crossplane CLI
(`crossplane beta validate`).

Schemas: plnt's XRDs (shipped inside the package, so this works from an installed wheel) and any
``--crds`` files or folders (providers' CRDs, Gateway API, ...). Resources: the XRDs and
Compositions themselves (checked against Crossplane's own CRDs, which `beta validate` reads from
the Crossplane image or its cache) and every YAML document in the given files and folders
(default ./examples: XRs with what they require and observe). Resources whose kind has no schema
are reported, and fail only with ``--error-on-missing-schemas``.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile
from typing import Any

import plnt
from plnt_host import render

PACKAGE = pathlib.Path(plnt.__file__).resolve().parent
XRDS = PACKAGE / "apis"
CHECKOUT_CLI = PACKAGE.parent / ".tools" / "bin" / "crank"  # what `make setup` builds


def xrd_files() -> list[pathlib.Path]:
    return sorted(XRDS.glob("*/definition.yaml"))


def crossplane_cli(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    return shutil.which("crossplane") or (str(CHECKOUT_CLI) if CHECKOUT_CLI.is_file() else None)


def run(args: argparse.Namespace) -> int:
    cli = crossplane_cli(args.crossplane)
    if cli is None:
        sys.stderr.write(
            "plnt validate: no Crossplane CLI: put crossplane on PATH or give --crossplane\n"
        )
        return 2
    try:
        docs = _documents(args)
    except render.ScenarioError as err:
        sys.stderr.write(f"plnt validate: {err}\n")
        return 2
    extensions = [str(f) for f in xrd_files()] + list(args.crds)
    with tempfile.TemporaryDirectory(prefix="plnt-validate-") as tmp:
        resources = pathlib.Path(tmp) / "resources.yaml"
        resources.write_text(render.dump(docs))
        cmd = [cli, "beta", "validate", ",".join(extensions), str(resources), *_flags(args)]
        try:
            proc = subprocess.run(cmd, check=False)
        except OSError as err:
            sys.stderr.write(f"plnt validate: cannot run {cli}: {err.strerror}\n")
            return 2
    return 0 if proc.returncode == 0 else 1


def _documents(args: argparse.Namespace) -> list[dict[str, Any]]:
    """What is validated: the XRDs, the Compositions and every YAML document of the paths
    (examples/ when none is given); ScenarioError when a path or a --crds file is missing."""
    paths = [pathlib.Path(p) for p in args.paths]
    if not paths and pathlib.Path("examples").is_dir():
        paths = [pathlib.Path("examples")]
    docs = [d for f in xrd_files() for d in render.load_yaml_docs(f)]
    docs += list(render.compositions().values())
    for path in paths:
        docs += render.load_path(path)
    for crd in args.crds:
        if not pathlib.Path(crd).exists():
            raise render.ScenarioError(f"--crds {crd}: no such file or folder")
    return docs


def _flags(args: argparse.Namespace) -> list[str]:
    """The options passed on to `crossplane beta validate`."""
    flags = []
    if args.cache_dir:
        flags += ["--cache-dir", args.cache_dir]
    if args.crossplane_image:
        flags += ["--crossplane-image", args.crossplane_image]
    if args.error_on_missing_schemas:
        flags.append("--error-on-missing-schemas")
    return flags
