"""Probing each InferenceCluster's workload API server, so an outage is seen within a bound.

Crossplane's Ready for an InferenceCluster comes from its composed resources as provider-
kubernetes last observed them: a workload API server that stops answering leaves it Ready. The
binder therefore asks each cluster itself: `GET /readyz` through the kubeconfig Secret the
InferenceCluster references (the one its ProviderConfig uses), every `interval` seconds, each
answer awaited at most `timeout` seconds in all (connecting, the TLS handshake and the
answer). A cluster is published Unreachable after `failures`
probes in a row fail and Reachable again after `successes` in a row answer 200
(`publish`, pure), on the InferenceCluster's `plnt.work/cluster-health` annotation
(plnt.cluster_health). With the defaults (every 5 s, 3 s timeout, 3 failures, 2 successes) an
API server that refuses, times out or hangs is known Unreachable at most interval x failures +
timeout = 18 s after it stopped answering (its first unanswered probe starts within one
interval), and one that answers again is known Reachable within interval x successes = 10 s;
the binder's pass that follows (every `--bind-interval`) publishes it.

Each probe that answers is followed by a reading of the cluster's Nodes that carry the pool
label (one list call, served from the API server's watch cache), counted per pool by
plnt.capacity.pool_nodes: what the binder publishes as `plnt.work/ready-nodes`, so capacity
follows the nodes that exist. A cluster that does not answer is not read: its last counts stand.

Probes run on threads of their own, never on the binder's pass: a hung API server costs its
probe the timeout and nothing else. Credentials stay in memory (the Kubernetes client writes
client certificates to private temporary files as it always does); what is logged and published
is the reason and the server's address, never the kubeconfig.
"""

from __future__ import annotations

import base64
import binascii
import concurrent.futures
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from plnt import cluster_health, labels
from plnt.capacity import pool_nodes
from plnt.cluster_health import Record

log = logging.getLogger(__name__)

INTERVAL = 5.0
TIMEOUT = 3.0  # under INTERVAL: a probe ends before the next one of its cluster is due
FAILURES = 3
SUCCESSES = 2
WORKERS = 16


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One probe: did /readyz answer 200, and if not why (a reason of plnt.cluster_health)."""

    ok: bool
    reason: str = ""
    message: str = ""


@dataclasses.dataclass(frozen=True)
class Streak:
    """Probes of one cluster in a row with the same answer: how many, since when (the start of
    the first of them, wall clock), and the last one's outcome."""

    ok: bool
    count: int
    first: float
    last: Outcome


def observe(streak: Streak | None, outcome: Outcome, started: float) -> Streak:
    if streak is not None and streak.ok == outcome.ok:
        return Streak(streak.ok, streak.count + 1, streak.first, outcome)
    return Streak(outcome.ok, 1, started, outcome)


def publish(
    previous: Record | None,
    streak: Streak | None,
    *,
    failures: int = FAILURES,
    successes: int = SUCCESSES,
) -> Record | None:
    """The record to publish given the one published (`previous`, read back from the cluster, so
    a restarted binder keeps `since`) and the probes in a row: Unreachable after `failures`
    failed ones (since the first of them, or since the published Unreachable began), Reachable
    after `successes` answered ones; until then what was published stands."""
    if streak is None:
        return previous
    if not streak.ok and streak.count >= failures:
        since = (
            previous.since
            if previous is not None and not previous.reachable
            else cluster_health.timestamp(streak.first)
        )
        message = streak.last.message[: cluster_health.MESSAGE_MAX]
        return Record(False, streak.last.reason, message, since)
    if streak.ok and streak.count >= successes:
        if previous is not None and previous.reachable:
            return previous
        since = cluster_health.timestamp(streak.first)
        return Record(True, cluster_health.REACHABLE, "answers /readyz", since)
    return previous


# --- where a cluster's kubeconfig is ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SecretRef:
    namespace: str
    name: str
    key: str


def secret_ref(cluster: Mapping[str, Any]) -> SecretRef | None:
    """The kubeconfig Secret an InferenceCluster's ProviderConfigs use: the Existing source's
    secretRef, or the Secret its CoreWeaveCluster publishes (`<name>-kubeconfig`, key
    `kubeconfig`, in the CoreWeave namespace); None when it names none."""
    spec = cluster.get("spec") or {}
    source = spec.get("cluster") or {}
    existing = source.get("existing") or {}
    ref = existing.get("secretRef") or {}
    if ref.get("name") and ref.get("namespace"):
        return SecretRef(ref["namespace"], ref["name"], ref.get("key") or "kubeconfig")
    coreweave = source.get("coreweave") or {}
    name = (cluster.get("metadata") or {}).get("name")
    if coreweave.get("namespace") and name:
        return SecretRef(coreweave["namespace"], f"{name}-kubeconfig", "kubeconfig")
    return None


def kubeconfig_text(secret_data: Mapping[str, str] | None, key: str) -> str | None:
    """The kubeconfig in a Secret's data (base64, as the API serves it); None if absent."""
    raw = (secret_data or {}).get(key)
    if not isinstance(raw, str):
        return None
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


# --- one probe ----------------------------------------------------------------------------


class Target:
    """A workload API server as its kubeconfig reaches it, with a client made once and kept
    while the kubeconfig does not change."""

    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import client, config

        from plnt_reconciler.kube import named

        doc = yaml.safe_load(kubeconfig)
        if not isinstance(doc, dict):
            raise ValueError("the kubeconfig is not a YAML map")
        configuration = client.Configuration()
        config.load_kube_config_from_dict(doc, client_configuration=configuration)
        configuration.retries = False  # one attempt: the probe's timeout is the bound
        self.server = configuration.host
        self.api = named(client.ApiClient(configuration))

    def close(self) -> None:
        self.api.close()

    def probe(self, timeout: float) -> Outcome:
        where = f"GET {self.server}/readyz"
        try:
            method, url, headers, body, post = self.api.param_serialize(
                "GET", "/readyz", auth_settings=["BearerToken"]
            )
            response = self.api.call_api(method, url, headers, body, post, _request_timeout=timeout)
            text = response.read() or b""
        except Exception as err:  # what the connection raised: classify it
            return classify(err, where, timeout)
        if response.status == 200:
            return Outcome(True)
        said = text[:120].decode(errors="replace").strip() if isinstance(text, bytes) else ""
        detail = f": {said}" if said else ""
        return Outcome(False, cluster_health.NOT_READY, f"{where}: HTTP {response.status}{detail}")

    def nodes(self, timeout: float, now: float) -> pool_nodes.Observation:
        """The pools' Nodes counted (plnt.capacity.pool_nodes), or why they could not be read."""
        where = f"GET {self.server}/api/v1/nodes"
        try:
            method, url, headers, body, post = self.api.param_serialize(
                "GET",
                "/api/v1/nodes",
                query_params=[("labelSelector", labels.POOL), ("resourceVersion", "0")],
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(method, url, headers, body, post, _request_timeout=timeout)
            text = response.read() or b""
        except Exception as err:
            return pool_nodes.Observation(now, error=classify(err, where, timeout).message)
        if response.status != 200:
            return pool_nodes.Observation(now, error=f"{where}: HTTP {response.status}")
        try:
            items = json.loads(text)["items"] or []
            found = [n for n in (pool_nodes.node_of(i) for i in items) if n is not None]
        except (ValueError, TypeError, KeyError, AttributeError):
            return pool_nodes.Observation(now, error=f"{where}: not a NodeList")
        return pool_nodes.Observation(now, pool_nodes.count(found))


def classify(err: BaseException, where: str, timeout: float) -> Outcome:
    """A failed connection's reason: refused, timed out (a hung or stopped server), else
    unreachable with the error's class (its text can carry the URL, never credentials)."""
    chain = _chain(err)
    said = " ".join(f"{type(e).__name__} {e}" for e in chain)
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "Connection refused" in said:
        return Outcome(False, cluster_health.REFUSED, f"{where}: connection refused")
    if any(isinstance(e, TimeoutError) for e in chain) or "imeout" in said or "timed out" in said:
        return Outcome(False, cluster_health.TIMED_OUT, f"{where}: no answer within {timeout:g}s")
    return Outcome(False, cluster_health.UNREACHABLE_REASON, f"{where}: {type(chain[-1]).__name__}")


def _chain(err: BaseException) -> list[BaseException]:
    """The error and what it wraps: causes, contexts and urllib3's `reason`."""
    out: list[BaseException] = []
    todo: list[Any] = [err]
    while todo and len(out) < 10:
        e = todo.pop()
        if not isinstance(e, BaseException) or any(e is o for o in out):
            continue
        out.append(e)
        todo += [getattr(e, "reason", None), e.__cause__, e.__context__]
    return out


# --- the prober ---------------------------------------------------------------------------


def _log_turn(name: str, streak: Streak | None, outcome: Outcome) -> None:
    """Logs a turn of the cluster's API server: the first failed probe (after answers, or of
    all), and the first answered one after failures."""
    if not outcome.ok and (streak is None or streak.ok):
        log.warning("cluster %s: %s: %s", name, outcome.reason, outcome.message)
    elif outcome.ok and streak is not None and not streak.ok:
        log.info("cluster %s: its API server answers again", name)


@dataclasses.dataclass
class _State:
    streak: Streak | None = None
    kubeconfig: str | None = None
    target: Target | None = None
    problem: str = ""  # why it cannot be probed (no Secret, no key, not a kubeconfig)
    busy: bool = False  # a probe is running
    nodes: pool_nodes.Observation | None = None  # the last reading of its Nodes


class Prober:
    """Probes every cluster it is told of, each at most once per `interval`, on a pool of
    threads; `streaks()` is what it saw. `read_secret(namespace, name)` gives a Secret's data."""

    def __init__(
        self,
        read_secret: Callable[[str, str], Mapping[str, str] | None],
        *,
        interval: float = INTERVAL,
        timeout: float = TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.read_secret = read_secret
        self.interval, self.timeout, self.clock = interval, timeout, clock
        self._clusters: dict[str, SecretRef | None] = {}
        self._states: dict[str, _State] = {}
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="probe")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, clusters: Mapping[str, Mapping[str, Any]]) -> None:
        """The clusters to probe (InferenceClusters by name), as the binder listed them."""
        refs = {name: secret_ref(obj) for name, obj in clusters.items()}
        with self._lock:
            self._clusters = refs
            for gone in set(self._states) - set(refs):
                state = self._states.pop(gone)
                if state.target is not None:
                    state.target.close()

    def streaks(self) -> dict[str, Streak | None]:
        with self._lock:
            return {name: s.streak for name, s in self._states.items()}

    def nodes(self) -> dict[str, pool_nodes.Observation | None]:
        """Each cluster's last reading of its Nodes (None: never read)."""
        with self._lock:
            return {name: s.nodes for name, s in self._states.items()}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="prober", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 1)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.round()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def round(self, wait: bool = False) -> None:
        """Starts a probe of every cluster whose last one has finished (`wait`: and waits for
        them, as a single pass does)."""
        with self._lock:
            clusters = dict(self._clusters)
        futures = []
        for name, ref in sorted(clusters.items()):
            with self._lock:
                state = self._states.setdefault(name, _State())
                if state.busy:
                    continue  # still waiting on a hung server: its timeout will end it
                state.busy = True
            futures.append(self._pool.submit(self._probe, name, ref))
        if wait:
            concurrent.futures.wait(futures)

    def _probe(self, name: str, ref: SecretRef | None) -> None:
        started = self.clock()
        try:
            target = self._target(name, ref)
            if target is None:
                return  # nothing to probe with: no health is published
            outcome = target.probe(self.timeout)
            self._record_outcome(name, outcome, started)
            if outcome.ok:
                self._record_nodes(name, target.nodes(self.timeout, self.clock()))
        except Exception as err:  # a probe must never take the prober down
            log.warning("cluster %s: probe failed: %s", name, type(err).__name__)
        finally:
            with self._lock:
                if name in self._states:
                    self._states[name].busy = False

    def _record_outcome(self, name: str, outcome: Outcome, started: float) -> None:
        """Adds a probe's outcome to its cluster's streak (a cluster no longer watched keeps
        nothing), saying when the API server stops or starts answering."""
        with self._lock:
            state = self._states.get(name)
            if state is None:
                return
            _log_turn(name, state.streak, outcome)
            state.streak = observe(state.streak, outcome, started)

    def _record_nodes(self, name: str, seen: pool_nodes.Observation) -> None:
        """Keeps a reading of the cluster's Nodes, saying once why they could not be counted."""
        with self._lock:
            state = self._states.get(name)
            if state is None:
                return
            before = state.nodes
            if seen.error and (before is None or before.error != seen.error):
                log.warning("cluster %s: Nodes not counted: %s", name, seen.error)
            state.nodes = seen

    def _target(self, name: str, ref: SecretRef | None) -> Target | None:
        """The cluster's client, made again when its kubeconfig changed; None (said once) when
        the Secret or its key is missing or it is not a kubeconfig."""
        problem, text = "", None
        if ref is None:
            problem = "it names no kubeconfig Secret"
        else:
            try:
                data = self.read_secret(ref.namespace, ref.name)
            except Exception as err:
                data, problem = None, f"reading Secret {ref.namespace}/{ref.name}: {err}"
            text = kubeconfig_text(data, ref.key)
            if text is None and not problem:
                problem = f"Secret {ref.namespace}/{ref.name} has no kubeconfig under {ref.key}"
        with self._lock:
            state = self._states.get(name)
            if state is None:
                return None
            if text is not None and text == state.kubeconfig and state.target is not None:
                return state.target
            old, state.target, state.kubeconfig = state.target, None, text
        if old is not None:
            old.close()
        if text is not None:
            try:
                target = Target(text)
            except Exception as err:  # its text may hold credentials: never logged
                problem = f"its kubeconfig does not load ({type(err).__name__})"
            else:
                with self._lock:
                    state.target, state.problem = target, ""
                return target
        with self._lock:
            if state.problem != problem:
                log.warning("cluster %s: not probed: %s", name, problem)
                state.problem = problem
        return None
