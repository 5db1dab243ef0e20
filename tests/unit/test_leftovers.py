"""The suite's own guard (tests/leftovers.py): a run fails naming a process it started that
outlived it, even one started in an xdist worker with a session of its own."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

from tests import leftovers
from tests.conftest import REPO

LEAKY_TEST = """
import subprocess


def test_starts_a_server_and_forgets_it():
    subprocess.Popen(["sleep", "600"], start_new_session=True)
"""
# The suite's own hooks, in a run of its own.
CONFTEST = "from tests.conftest import pytest_configure, pytest_sessionfinish  # noqa: F401\n"


def test_a_run_that_leaves_a_process_running_fails_naming_it(tmp_path: pathlib.Path) -> None:
    (tmp_path / "test_leaky.py").write_text(LEAKY_TEST)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider", "."],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 process(es) this test run started outlived it (now killed)" in run.stdout
    named = re.findall(r"pid (\d+) \(parent \d+\): sleep 600", run.stdout)
    assert len(named) == 1, run.stdout
    assert not leftovers.running(int(named[0]))
