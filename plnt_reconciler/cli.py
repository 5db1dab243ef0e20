"""`plnt reconcile`: scale ModelDeployments toward their tokens-per-second target, and bind
proposed ModelReplicas to capacity (docs/scheduler.md, "Binding").

    plnt reconcile [--kubeconfig PATH] [--prometheus-url URL] [--interval SECONDS] [--once]
                   [--max-step N] [--stabilization-seconds S] [--health-address HOST:PORT]
                   [--bind | --bind-only] [--bind-interval SECONDS] [--ledger-namespace NS]
                   [--forget-lost-ledger CLUSTER] [--probe-interval S] [--probe-timeout S]
                   [--probe-failures N] [--probe-successes N]

With --once it lists ModelDeployments, makes one pass, prints one line per ModelDeployment and
exits (1 if any write failed). Otherwise it watches ModelDeployments and reconciles every
interval until SIGTERM, serving /healthz and /readyz. --bind also runs the binder every
--bind-interval; --bind-only runs nothing else (no Prometheus needed). The long-running binder
reads from list-then-watch caches (plnt_reconciler.reads) and runs a pass as soon as one of them
changes, else every --bind-interval; it also probes each InferenceCluster's API server every
--probe-interval and publishes its health (plnt_reconciler.probe).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from plnt_reconciler.decision import Policy

if TYPE_CHECKING:
    from plnt_reconciler.binder import ClusterOutcome
    from plnt_reconciler.kube import Kube
    from plnt_reconciler.loop import Reconciler


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="plnt reconcile",
        description="scale ModelDeployments toward a token rate",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube)")
    p.add_argument(
        "--prometheus-url",
        default="http://prometheus-operated.monitoring.svc:9090",
        help="base URL of a Prometheus-compatible query API",
    )
    p.add_argument("--interval", type=float, default=30.0, help="seconds between passes")
    p.add_argument("--once", action="store_true", help="one pass, print the decisions, exit")
    p.add_argument("--max-step", type=int, default=4, help="most replicas added per decision")
    p.add_argument(
        "--stabilization-seconds",
        type=float,
        default=300.0,
        help="how long the rate must stay low before scaling down",
    )
    p.add_argument("--rate-window", default="2m", help="PromQL range for rate() (e.g. 2m)")
    p.add_argument(
        "--stale-after",
        type=float,
        default=120.0,
        help="seconds after which a deployment's newest sample counts as stale",
    )
    p.add_argument("--health-address", default="0.0.0.0:8081", help="HOST:PORT for probes")
    p.add_argument("--debug", action="store_true", help="log at debug level")
    binder = p.add_mutually_exclusive_group()
    binder.add_argument(
        "--bind", action="store_true", help="also bind proposed ModelReplicas to capacity"
    )
    binder.add_argument(
        "--bind-only", action="store_true", help="only bind ModelReplicas (no autoscaling)"
    )
    p.add_argument("--bind-interval", type=float, default=2.0, help="seconds between binds")
    p.add_argument(
        "--ledger-namespace",
        default="plnt-system",
        help="namespace of the per-cluster ledger ConfigMaps (must exist)",
    )
    p.add_argument(
        "--probe-interval",
        type=float,
        default=5.0,
        help="with the binder: seconds between probes of each workload cluster's API server "
        "(/readyz); 0 turns probing off",
    )
    p.add_argument(
        "--probe-timeout",
        type=float,
        default=3.0,
        help="seconds a probe waits for an answer (less than --probe-interval)",
    )
    p.add_argument(
        "--probe-failures",
        type=int,
        default=3,
        help="failed probes in a row that make a cluster Unreachable",
    )
    p.add_argument(
        "--probe-successes",
        type=int,
        default=2,
        help="answered probes in a row that make an Unreachable cluster Reachable again",
    )
    p.add_argument(
        "--forget-lost-ledger",
        action="append",
        default=[],
        metavar="CLUSTER",
        help="with --bind-only --once: start a new ledger for CLUSTER, whose two ledger "
        "ConfigMaps are both gone and no backup is left; its replicas are bound again oldest "
        "first (docs/reconciler.md)",
    )
    return p


def seconds(duration: str) -> float | None:
    """A PromQL duration such as 90s, 2m or 1h in seconds; None if it is not that simple."""
    match = re.fullmatch(r"(\d+)(ms|s|m|h)", duration)
    if not match:
        return None
    return int(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[2]]


def _rate_window_problem(args: argparse.Namespace) -> str:
    """What is wrong with --rate-window, alone or against the stabilization window ("" if
    nothing)."""
    window = seconds(args.rate_window)
    if window is None or window <= 0:
        return f"--rate-window {args.rate_window!r}: give a duration like 90s or 2m"
    if args.stabilization_seconds < window:
        # rate() over a young series (a pod just added) reads low for one rate window; the
        # stabilization window must outlast that or every scale-up invites a scale-down.
        return "--stabilization-seconds must be at least the --rate-window"
    return ""


# The other option checks, in the order they are reported: (is it invalid, what to say).
_OPTION_RULES: tuple[tuple[Callable[[argparse.Namespace], bool], str], ...] = (
    (lambda a: a.interval <= 0, "--interval must be > 0"),
    (lambda a: a.max_step < 1, "--max-step must be >= 1"),
    (lambda a: a.stabilization_seconds < 0, "--stabilization-seconds must be >= 0"),
    (lambda a: a.stale_after <= 0, "--stale-after must be > 0"),
    (lambda a: a.bind_interval <= 0, "--bind-interval must be > 0"),
    (
        lambda a: a.probe_interval < 0 or a.probe_timeout <= 0,
        "--probe-interval must be >= 0 and --probe-timeout > 0",
    ),
    # a probe still waiting when its next one is due makes it skip a round
    (
        lambda a: bool(a.probe_interval) and a.probe_timeout >= a.probe_interval,
        "--probe-timeout must be less than --probe-interval",
    ),
    (
        lambda a: a.probe_failures < 1 or a.probe_successes < 1,
        "--probe-failures and --probe-successes must be >= 1",
    ),
    (
        lambda a: bool(a.forget_lost_ledger) and not (a.bind_only and a.once),
        "--forget-lost-ledger is one decision: give it with --bind-only --once",
    ),
)


def _check(args: argparse.Namespace) -> str:
    """The first problem with the options, "" when there is none."""
    problem = _rate_window_problem(args)
    if problem:
        return problem
    return next((message for invalid, message in _OPTION_RULES if invalid(args)), "")


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exit_:
        return int(exit_.code or 0)
    problem = _check(args)
    if problem:
        sys.stderr.write(f"plnt reconcile: {problem}" + "\n")
        return 2
    if importlib.util.find_spec("kubernetes") is None:
        # Function images leave the Kubernetes client out; only the reconciler needs it.
        sys.stderr.write(
            "plnt reconcile: needs the reconciler extra: pip install 'plnt[reconciler]'\n"
        )
        return 2
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    if not args.debug:  # httpx logs every query URL at INFO
        logging.getLogger("httpx").setLevel(logging.WARNING)
    from plnt_reconciler import kube, loop, metrics

    try:
        api = kube.api_client(args.kubeconfig)
    except Exception as err:  # any config problem is a usage error here
        sys.stderr.write(f"plnt reconcile: cannot load Kubernetes config: {err}" + "\n")
        return 2
    if args.bind_only:
        try:
            return _bind(args, api)
        finally:
            api.close()
    cluster = kube.Kube(api)
    prometheus = metrics.Prometheus(
        args.prometheus_url, rate_window=args.rate_window, stale_after=args.stale_after
    )
    policy = Policy(max_step=args.max_step, stabilization_seconds=args.stabilization_seconds)
    reconciler = loop.Reconciler(cluster, prometheus, policy)
    binder_stop = threading.Event()
    binder_thread = None
    if args.bind and not args.once:
        binder_thread = threading.Thread(
            target=_bind, args=(args, api, binder_stop), name="bind", daemon=True
        )
        binder_thread.start()
    try:
        if args.once:
            failed = _bind(args, api) if args.bind else 0
            return _once(cluster, reconciler) or failed
        return _forever(args, cluster, reconciler)
    finally:
        binder_stop.set()
        if binder_thread is not None:
            binder_thread.join(timeout=10)
        prometheus.close()
        api.close()


def _once(cluster: Kube, reconciler: Reconciler) -> int:
    from plnt_reconciler import kube

    try:
        items, _ = cluster.list_model_deployments()
    except Exception as err:
        sys.stderr.write(f"plnt reconcile: listing ModelDeployments: {kube.api_error(err)}" + "\n")
        return 1
    outcomes = reconciler.reconcile(items)
    for outcome in outcomes:
        sys.stdout.write(outcome.line() + "\n")
    return 1 if any(o.error and o.decision for o in outcomes) else 0


def _forever(args: argparse.Namespace, cluster: Kube, reconciler: Reconciler) -> int:
    from plnt_reconciler import health, kube, loop

    stop = _stopped_by_signals()
    cache = kube.ModelDeploymentCache(cluster)
    heartbeat = loop.Heartbeat(args.interval)
    server = health.serve(
        args.health_address,
        alive=heartbeat.alive,
        ready=lambda: cache.synced.is_set() and heartbeat.ready.is_set(),
    )
    watcher = threading.Thread(target=cache.run, args=(stop,), name="watch", daemon=True)
    watcher.start()
    while not cache.synced.wait(1.0):
        if stop.is_set():
            return 0
    try:
        loop.run(reconciler, cache.snapshot, args.interval, stop, heartbeat)
    finally:
        cache.close()
        server.shutdown()
    return 0


def _bind(args: argparse.Namespace, api: object, stop: threading.Event | None = None) -> int:
    """The binder: one pass with --once (a line per cluster; 1 if a cluster failed), else a pass
    every --bind-interval until SIGTERM (or `stop`)."""
    from kubernetes import client

    from plnt_reconciler import binder, kube, reads

    prober = None
    if not args.once and args.probe_interval > 0:
        prober = _prober(args, api)
    watched = None
    if not args.once:
        # The watches hold their connections open: a client (and connection pool) of their own.
        watch_api = kube.named(client.ApiClient(api.configuration))  # type: ignore[attr-defined]
        watched = reads.Watched(watch_api, args.ledger_namespace)
        watched.start()
    b = binder.Binder(
        api,  # type: ignore[arg-type]
        namespace=args.ledger_namespace,
        forget_lost=set(args.forget_lost_ledger),
        prober=prober,
        failures=args.probe_failures,
        successes=args.probe_successes,
        reads=watched,
    )
    if prober is not None:
        prober.start()
    try:
        return _bind_passes(args, b, stop, watched)
    finally:
        if prober is not None:
            prober.stop()
        if watched is not None:
            watched.close()
            watch_api.close()


def _prober(args: argparse.Namespace, api: Any) -> Any:
    """The workload API servers' prober (plnt_reconciler.probe), reading kubeconfig Secrets."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from plnt_reconciler import probe

    core = client.CoreV1Api(api)

    def read_secret(namespace: str, name: str) -> dict[str, str] | None:
        try:
            data = core.read_namespaced_secret(name, namespace).data or {}
            return {k: v for k, v in data.items() if isinstance(v, str)}
        except ApiException as err:
            if err.status == 404:
                return None
            raise RuntimeError(f"HTTP {err.status}") from None  # the body is never carried

    return probe.Prober(read_secret, interval=args.probe_interval, timeout=args.probe_timeout)


# The least time between the starts of two binder passes, however often the caches change.
MIN_PASS_GAP = 0.25


def _bind_passes(
    args: argparse.Namespace, b: Any, stop: threading.Event | None, watched: Any = None
) -> int:
    if args.once:
        return _bind_pass_once(b)
    if stop is None:
        stop = _stopped_by_signals()
    log = logging.getLogger("plnt_reconciler.binder")
    said = _ChangedLines(log)
    lagging: list[str] = []
    while not stop.is_set():
        started = time.monotonic()
        if watched is not None:
            lagging = _caches_behind(watched, args.bind_interval, lagging, log)
            if lagging:  # as a failed list: no pass until the caches are current again
                continue
        try:
            for outcome in b.bind_once():
                said.log(outcome)
        except Exception:
            log.exception("bind pass failed")
        if watched is None:
            stop.wait(args.bind_interval)
        else:  # the next pass as soon as something changed, at the latest after the interval
            watched.wait_changed(args.bind_interval)
            stop.wait(max(0.0, MIN_PASS_GAP - (time.monotonic() - started)))
    return 0


def _bind_pass_once(b: Any) -> int:
    """One binder pass, a line per cluster on stdout; 1 if the pass or a cluster failed."""
    try:
        outcomes = b.bind_once()
    except Exception as err:
        sys.stderr.write(f"plnt reconcile: binding: {type(err).__name__}: {err}" + "\n")
        return 1
    for outcome in outcomes:
        sys.stdout.write(outcome.line() + "\n")
    return 1 if any(o.error for o in outcomes) else 0


def _stopped_by_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def _caches_behind(
    watched: Any, timeout: float, lagging: list[str], log: logging.Logger
) -> list[str]:
    """The caches that have not listed again within `timeout` (none: every one is current),
    with a warning when that set changes."""
    behind: list[str] = watched.wait_synced(timeout)
    if behind and behind != lagging:
        log.warning("waiting for the caches of %s to list again", ", ".join(behind))
    return behind or []


class _ChangedLines:
    """Logs each cluster's outcome line when it differs from the last one logged, so a steady
    binder logs changes, not every pass."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._last: dict[str, str] = {}

    def log(self, outcome: ClusterOutcome) -> None:
        line = outcome.line()
        if self._last.get(outcome.cluster) != line:
            self._log.log(logging.WARNING if outcome.error else logging.INFO, "%s", line)
            self._last[outcome.cluster] = line
