from __future__ import annotations

import pathlib

import pytest

from tests.conformance import servers


@pytest.fixture(scope="session")
def functions_file(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A functions.yaml whose Functions are real `plnt function` servers on loopback."""
    tmp = tmp_path_factory.mktemp("functions")
    with servers.serve_all(tmp) as addresses:
        path = tmp / "functions.yaml"
        path.write_text(servers.functions_manifest(addresses))
        yield path
