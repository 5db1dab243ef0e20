"""plnt works from its wheel alone: installed into a fresh virtualenv outside the source tree,
`plnt render` finds its Compositions, and the install carries no Kubernetes client."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from plnt_host import render
from tests.images.conftest import REPO, Built

EXAMPLE = REPO / "examples" / "workflowrun-llama-70b"


def _run(argv: list[str | os.PathLike], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_render_from_an_installed_wheel(built: Built, tmp_path: pathlib.Path) -> None:
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", venv], tmp_path)
    assert made.returncode == 0, made.stderr
    installed = _run(
        [venv / "bin/python", "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
         built.wheelhouse, built.plnt_wheel],
        tmp_path,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr

    where = _run([venv / "bin/python", "-c", "import plnt; print(plnt.__file__)"], tmp_path)
    assert where.stdout.startswith(str(venv)), where.stdout  # not the source tree

    rendered = _run([venv / "bin/plnt", "render", "--tree", EXAMPLE], tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    want = render.dump(render.render(render.load_scenario(EXAMPLE), tree=True).stream())
    assert rendered.stdout == want
    assert "kind: ModelDeployment" in rendered.stdout and "kind: ModelReplica" in rendered.stdout

    # `plnt validate` finds the XRDs inside the package too.
    xrds = _run(
        [
            venv / "bin/python",
            "-c",
            "from plnt_host import validate; print(len(validate.xrd_files()))",
        ],
        tmp_path,
    )
    assert xrds.stdout.strip() == str(len(list(REPO.glob("apis/*/definition.yaml"))))

    # Only the reconciler needs the Kubernetes client: it is an extra, and says so when absent.
    kube = _run([venv / "bin/python", "-c", "import kubernetes"], tmp_path)
    assert kube.returncode != 0
    reconcile = _run([venv / "bin/plnt", "reconcile", "--once"], tmp_path)
    assert reconcile.returncode == 2
    assert "pip install 'plnt[reconciler]'" in reconcile.stderr
