"""The Go oracle, built once per session (and reused across sessions while unchanged)."""

from __future__ import annotations

import pathlib

import pytest

from tests.cel.oracle import build_oracle


@pytest.fixture(scope="session")
def oracle() -> pathlib.Path:
    return build_oracle()
