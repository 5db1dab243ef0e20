"""Shared fixtures: paths, the real Crossplane CLI, and function servers on loopback."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import pathlib
import sys

import pytest

from tests import leftovers

REPO = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SHARED_CRDS = REPO / "third_party" / "crds"  # vendored: third_party/SOURCES
CRANK = REPO / ".tools" / "bin" / "crank"

# `make test` runs pytest with `--dist loadgroup`: each xdist group runs on one worker, in file
# order. The live control plane's rollouts are gated on measured TTFT against the seed's 250 ms
# budget, and the llama-server test compares two clients' latencies; tests that saturate the cores
# (two burners, a 6,000-call storm) starved them into failing (p95 TTFT 447 ms measured beside the
# burners). So all of these share the "e2e" worker and never overlap. The package-install test
# brings up a bare control plane of its own and measures nothing: a group of its own
# ("e2e-packages"), on the other worker beside the shared stack.
# Two workers share two cores with the stack's dozen processes, so separating the groups is not
# enough (a CI run still measured p95 TTFT 417 ms for a 20 ms engine): every other test runs at
# nice 10, and the CPU goes to the latency-gated work first. Tests that time things on a clock
# (the gate's client against its fake engines, Prometheus rates of the reconciler's engines)
# failed at nice 10 beside the stack (a 30 ms gap between chunks not seen, 186 tok/s measured
# for 200): they are the "timing" group, at nice 0 too, 40 s in all.
FOREGROUND_GROUPS = frozenset({"e2e", "timing"})
BACKGROUND_NICE = 10
_GROUP = pytest.StashKey[str | None]()
WORKER_GROUPS = {
    "tests/e2e/test_package_install.py": "e2e-packages",
    "tests/e2e/test_control_plane_cost.py": "e2e-packages",  # a stack of its own, like it
    "tests/e2e/": "e2e",
    "tests/engine/test_llama_server.py": "e2e",
    "tests/robustness/test_contention.py": "e2e",
    "tests/robustness/test_concurrency.py": "e2e",
    "tests/gate/": "timing",
    "tests/reconcile/test_cli.py": "timing",
    "tests/reconcile/test_metrics.py": "timing",
}


# Every test runs under a time limit (pytest-timeout): `timeout` in pyproject.toml (120 s) for
# all of them, twice the slowest measured among the rest (59 s: a fuzz test on 2 cores at load 17).
# Tests known to take longer get more, setup and teardown included (the longest that applies):
# by path, those that start real servers or build what they run, and by fixture, those whose
# fixture compiles a Go program (190-210 s measured with Go's build cache cold and the cores
# busy). A test's own timeout marker wins over all of these, and `--timeout` on the command line
# (`make fuzz`'s longer runs; 0 for none while debugging) over all but the test's own marker.
# The signal method raises in the test's own frame: the failure shows where it waited (and every
# other thread's stack), and the fixtures' teardown still stops what the test started. pytest-
# timeout's thread method instead ends the whole xdist worker, which reports only "worker
# crashed" (the stacks it prints are lost with the worker) and leaves a live stack running.
TIME_LIMITS = {
    # The first test builds every package (8 min 18 s cold, seconds warm) and starts a bare
    # control plane; the install then has 180 s (tests/e2e/packages.py). Warm, its setup took
    # 104 s (the install 28 s), the other tests under 2 s each.
    "tests/e2e/test_package_install.py": 1800,
    # The first test starts the shared stack (a function image built like `make package`, which
    # may wait for the package-install test's build); each scenario waits for kwok-paced replicas.
    "tests/e2e/": 1200,
    # A function image from a cold Debian base (mmdebstrap: 3.5 min) and its run under runc.
    "tests/images/": 1800,
    # Real servers: kube-apiserver and etcd, Prometheus (12 scrapes 1 s apart), function servers
    # under a thousand concurrent calls, the Crossplane CLI running functions.
    "tests/reconcile/": 300,
    "tests/robustness/": 300,
    "tests/conformance/": 300,
}
FIXTURE_TIME_LIMITS = {"k8svalidate": 600, "oracle": 600}
# A hang inside C code never returns to the interpreter, so the signal's exception never comes:
# that long after the limit, faulthandler writes every thread's stack to the terminal and ends
# the process (pytest-xdist then reports the test its worker crashed in).
BACKSTOP_S = 60
_STDERR = pytest.StashKey[int]()
_RUN = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    # faulthandler writes to a copy of the terminal's stderr: fd 2 is captured during a test
    config.stash[_STDERR] = os.dup(sys.__stderr__.fileno() if sys.__stderr__ else 2)
    if not hasattr(config, "workerinput"):  # the session's own process, not an xdist worker
        config.stash[_RUN] = leftovers.start_run()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the group into the nodeid
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    limit_given = config.getoption("timeout", None) is not None
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = next((g for prefix, g in WORKER_GROUPS.items() if path.startswith(prefix)), None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        item.stash[_GROUP] = group
        limits = [s for prefix, s in TIME_LIMITS.items() if path.startswith(prefix)][:1]
        fixtures = getattr(item, "fixturenames", ())
        limits += [s for name, s in FIXTURE_TIME_LIMITS.items() if name in fixtures]
        if limits and not limit_given and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(max(limits)))


def _time_limit(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and (marker.args or "timeout" in marker.kwargs):
        return float(marker.args[0] if marker.args else marker.kwargs["timeout"])
    option = item.config.getoption("timeout", None)
    return float(option if option is not None else item.config.getini("timeout") or 0)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """Arms the backstop for the test's whole run (setup, call, teardown), as pytest-timeout
    times it."""
    limit = _time_limit(item)
    if limit > 0:
        faulthandler.dump_traceback_later(
            limit + BACKSTOP_S, exit=True, file=item.config.stash[_STDERR]
        )
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(trylast=True)  # after pytest-xdist has ended its workers
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fails the run naming every process it started that is still running (and stops them)."""
    token = session.config.stash.get(_RUN, None)
    if token is None:
        return
    left = leftovers.leftovers(token)
    if not left:
        return
    leftovers.stop(token, left)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} process(es) this test run started outlived it (now killed):"]
    lines += [f"  {p}" for p in left]
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_sep("=", "processes left running", red=True)
        for line in lines:
            reporter.write_line(line)
    else:
        print("\n".join(lines), file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(tryfirst=True)  # before any fixture: the shared stack inherits the niceness
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Background tests yield the CPU to the latency-gated group (see WORKER_GROUPS)."""
    nice = 0 if item.stash.get(_GROUP, None) in FOREGROUND_GROUPS else BACKGROUND_NICE
    if os.getpriority(os.PRIO_PROCESS, 0) == nice:
        return
    # lowering niceness needs root: without it this worker stays a background one
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, nice)


@pytest.fixture(scope="session")
def crank() -> pathlib.Path:
    """The real Crossplane CLI; `make test` builds it, so its absence is a failure, never a skip."""
    if not CRANK.is_file():
        pytest.fail(f"{CRANK} is missing: run `make test` (hack/setup.sh builds it)")
    return CRANK


@pytest.fixture(scope="session")
def k8svalidate() -> pathlib.Path:
    """Kubernetes' own strict decoding and validation (tests/k8svalidate, built with Go)."""
    from tests.k8svalidate import runner

    return runner.build()
