"""The binder: commits proposed ModelReplicas to per-cluster ledgers, as kube-scheduler binds pods.

One pass: list InferenceClusters and InferenceClasses; read every ledger from its two copies
(the published `<namespace>/plnt-ledger-<cluster>`, then the binder's record
`plnt-ledger-record-<cluster>`, one list call each: `ledger.hold`); then list every ModelReplica
(after the ledgers, which is what lets `ledger.decide` release entries of deleted replicas); per
cluster, decide, write the record and then the published copy, each with the resourceVersion it
was read at (create when there was none, or when a copy was lost: it is rebuilt from the other),
and only after both writes succeeded, annotate the replicas (binding, refusal, over-commit). A
conflict (another binder, or a concurrent pass) re-reads that cluster's ledger and the replicas
and decides again. A ledger that cannot be read (a copy that does not parse, copies that
contradict each other, both gone after a commit) closes its cluster: nothing is committed there,
proposals no copy holds are refused naming the ConfigMap and the fault, and a Warning Event on
the InferenceCluster says so (docs/reconciler.md). Last, the fleet view
(`plnt.capacity.fleet_view`) of the ledgers as committed, a closed cluster offering nothing:
what the ModelDeployment function schedules on instead of the whole fleet.

Tenancy (plnt.capacity.tenant, docs/tenancy.md): before the clusters, every InferenceQuota's quota
ledger (`plnt-quota-<name>`, same namespace, with its record) is decided and written the same
way, so no two binders reserve past `hard` (the quota ledgers of deleted InferenceQuotas are
deleted first, so nothing waits on them); a cluster then never commits a replica its fence
(`spec.namespaceSelector`, over the Namespaces' labels) keeps off, nor one a quota covering its
namespace has not reserved. Each InferenceQuota's status (used, namespaces) is written last.

Writes are merge patches of annotations (field manager plnt-binder) and ConfigMap
create/replace; the ModelReplica's spec is never touched.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import socket
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Generic

import pydantic
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from plnt import cluster_health, contracts, names, workload_cluster
from plnt.capacity import (
    binding,
    commit,
    fleet_view,
    ledger,
    ledger_parse,
    offer,
    pool_nodes,
    quotas,
)
from plnt.capacity.commit import LedgerT
from plnt.capacity.ledger_parse import UnreadableLedgerError
from plnt_reconciler import probe, reflector
from plnt_reconciler.kube import api_map
from plnt_reconciler.reads import CONFIGMAPS, NAMESPACES, Listed, Reads

log = logging.getLogger(__name__)

GROUP, VERSION = contracts.MODELPLANE_GROUP, contracts.MODELPLANE_VERSION
FIELD_MANAGER = "plnt-binder"
LEDGER_LABEL = ledger.LEDGER_LABEL
COMPONENT = "plnt-binder"
EVENT_NAMESPACE = "default"  # Events about cluster-scoped objects live there, as for Nodes
MAX_ATTEMPTS = 8  # per cluster and pass; a conflict means someone else made progress
# Test-only fault injection (docs/reconciler.md, "Testing restarts"): when this environment
# variable is set, the process exits right after a cluster's ledger commit that has replicas to
# annotate, before writing any annotation, as a crash at that point would. The live restart test
# (tests/e2e/test_restarts.py) shows that a binder started again finishes what was committed.
CRASH_AFTER_LEDGER_WRITE = "PLNT_TEST_CRASH_AFTER_LEDGER_WRITE"
CRASH_EXIT_CODE = 86


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata of an object read from the API server, which always sends it."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ValueError("an object without metadata from the API server")
    return meta


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


ledger_name = ledger.ledger_name
# The binder's own copies of its ledgers (plnt.capacity.commit, "a ledger kept twice"): labels
# of their own, so nothing that selects the published ledgers by label ever reads a record.
RECORD_LABEL = "plnt.work/ledger-record"
QUOTA_RECORD_LABEL = "plnt.work/quota-ledger-record"


LEDGER_LABELS = (LEDGER_LABEL, RECORD_LABEL, quotas.QUOTA_LEDGER_LABEL, QUOTA_RECORD_LABEL)


def _newest_ledger(config_maps: Mapping[str, Mapping[str, Any]]) -> int | None:
    """The newest resourceVersion among the ledger copies (cluster and quota ledgers, published
    and records); None when one is not a revision."""
    newest = 0
    for cm in config_maps.values():
        if any(_labels(cm).get(label) == "true" for label in LEDGER_LABELS):
            version = reflector.revision(_meta(cm).get("resourceVersion"))
            if version is None:
                return None
            newest = max(newest, version)
    return newest


def record_name(cluster: str) -> str:
    return names.dns_subdomain("plnt-ledger-record", cluster)


def quota_record_name(quota: str) -> str:
    return names.dns_subdomain("plnt-quota-record", quota)


def _read(
    parse: Callable[[str | None, str, str], LedgerT],
) -> Callable[[Mapping[str, Any], str, str], LedgerT | UnreadableLedgerError]:
    """A copy's reading by plnt.capacity.ledger_parse (the functions' own), as a value: the ledger,
    or the error naming the ConfigMap and its fault."""

    def read(cm: Mapping[str, Any], key: str, data_key: str) -> LedgerT | UnreadableLedgerError:
        meta = cm.get("metadata") or {}
        where = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        try:
            return parse((cm.get("data") or {}).get(data_key), key, where)
        except UnreadableLedgerError as err:
            return err

    return read


@dataclasses.dataclass(frozen=True)
class _Kind(Generic[LedgerT]):
    """Cluster ledgers or quota ledgers: where their two copies live and how they read (as
    the functions read them)."""

    label: str  # the published copy's label (what the functions select)
    record_label: str
    data_key: str
    name_of: Callable[[str], str]
    record_of: Callable[[str], str]
    fresh: Callable[[str], LedgerT]
    # (ConfigMap as a dict, key, data key) -> the ledger or why not
    read: Callable[[Mapping[str, Any], str, str], LedgerT | UnreadableLedgerError]


CLUSTER_LEDGERS: _Kind[ledger.Ledger] = _Kind(
    LEDGER_LABEL, RECORD_LABEL, ledger.LEDGER_DATA_KEY, ledger_name, record_name,
    lambda k: ledger.Ledger(cluster=k), _read(ledger_parse.parse_cluster_ledger),
)  # fmt: skip
QUOTA_LEDGERS: _Kind[quotas.QuotaLedger] = _Kind(
    quotas.QUOTA_LEDGER_LABEL, QUOTA_RECORD_LABEL, quotas.QUOTA_DATA_KEY,
    quotas.quota_ledger_name, quota_record_name, lambda k: quotas.QuotaLedger(quota=k),
    _read(ledger_parse.parse_quota_ledger),
)  # fmt: skip


@dataclasses.dataclass
class ClusterOutcome:
    cluster: str
    bound: int = 0
    refused: dict[str, str] = dataclasses.field(default_factory=dict)
    over: dict[str, str] = dataclasses.field(default_factory=dict)
    conflicts: int = 0
    error: str = ""
    closed: commit.Closed | None = None  # its ledger cannot be read: every proposal refused
    rebuilt: str = ""  # a lost copy of its ledger rebuilt from the other

    def line(self) -> str:
        text = f"cluster {self.cluster}: {self.bound} bound, {len(self.refused)} refused"
        text += f", {len(self.over)} over-committed, {self.conflicts} conflicts"
        if self.closed is not None:
            text += f" [closed: {self.closed.message}]"
        if self.rebuilt:
            text += f" [rebuilt {self.rebuilt}]"
        for key, why in sorted(self.refused.items()):
            text += f"; refused {key}: {why}"
        for key, why in sorted(self.over.items()):
            text += f"; over-committed {key}: {why}"
        return text + (f" [error: {self.error}]" if self.error else "")


@dataclasses.dataclass
class _PassReads:
    """What a pass reads before it decides, the ledgers before the replicas (`Binder._after`)."""

    clusters: dict[str, dict[str, Any]]  # InferenceClusters by name
    classes: dict[str, dict[str, Any]]  # InferenceClasses by name
    inference_quotas: dict[str, dict[str, Any]]  # by name
    namespaces: dict[str, dict[str, str]]  # each Namespace's labels
    config_maps: Mapping[str, Mapping[str, Any]]  # the ledger namespace's, by name
    counted: _Lazy  # the ledger sequence the fleet view last counted per cluster
    ledgers: dict[str, commit.Held[ledger.Ledger]]
    quota_ledgers: dict[str, commit.Held[quotas.QuotaLedger]]
    # A quota's conflict lists them again, in place, for the rest of the pass.
    replicas: list[commit.Replica]
    caches: list[commit.Replica]


class Binder:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str = "plnt-system",
        forget_lost: set[str] | None = None,
        *,
        prober: probe.Prober | None = None,
        failures: int = probe.FAILURES,
        successes: int = probe.SUCCESSES,
        reads: Reads | None = None,
    ) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.instance = socket.gethostname()
        self._said: dict[tuple[str, str], str] = {}  # (kind, name): the problem last reported
        # Clusters whose lost ledger (both copies gone) an operator chose to start again.
        self.forget_lost = forget_lost or set()
        self.crash_after_ledger_write = bool(os.environ.get(CRASH_AFTER_LEDGER_WRITE))
        # The workload API servers' health (plnt_reconciler.probe): published on each
        # InferenceCluster every pass, before the fleet view is written from them.
        self.prober = prober
        self.failures, self.successes = failures, successes
        # Where a pass reads from (plnt_reconciler.reads): list calls, or watched caches.
        self.reads: Reads = reads if reads is not None else Listed(api, namespace)

    # --- reads ----------------------------------------------------------------------------

    def _list(self, plural: str) -> list[dict[str, Any]]:
        """A fresh list of a custom kind (after a conflict, or when a cache lags a ledger)."""
        listed = api_map(self.custom.list_cluster_custom_object(GROUP, VERSION, plural))
        return listed.get("items", [])

    def _as_dict(self, obj: Any) -> dict[str, Any]:
        """A typed answer of the core API as the map the API server sent."""
        return api_map(self.api.sanitize_for_serialization(obj))

    def read_ledgers(
        self,
        clusters: set[str],
        counted: Callable[[str], int] = lambda _: 0,
        config_maps: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> dict[str, commit.Held[ledger.Ledger]]:
        """Every cluster's ledger from its two copies (plnt.capacity.commit, "a ledger kept
        twice") in `config_maps` (the ledger namespace's, read once for the pass: a pass costs
        the same on 1 or 1,000 clusters). `counted`: the last sequence the binder counted for a
        cluster (asked only when both copies are gone)."""
        cms = self.reads.config_maps() if config_maps is None else config_maps
        return self._hold_all(CLUSTER_LEDGERS, clusters, counted, cms)

    def read_ledger(self, cluster: str) -> commit.Held[ledger.Ledger]:
        """One cluster's ledger, read fresh (after a conflict, or before writing only
        annotations)."""
        return self._hold_one(
            CLUSTER_LEDGERS, cluster, lambda _: self._counted_view().get(cluster, 0)
        )

    def read_quota_ledgers(
        self,
        wanted: set[str],
        counted: Callable[[str], int] = lambda _: 0,
        config_maps: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> dict[str, commit.Held[quotas.QuotaLedger]]:
        cms = self.reads.config_maps() if config_maps is None else config_maps
        return self._hold_all(QUOTA_LEDGERS, wanted, counted, cms)

    def read_quota_ledger(
        self, quota: str, counted: Callable[[str], int] = lambda _: 0
    ) -> commit.Held[quotas.QuotaLedger]:
        return self._hold_one(QUOTA_LEDGERS, quota, counted)

    def _hold_all(
        self,
        kind: _Kind[LedgerT],
        keys: set[str],
        counted: Callable[[str], int],
        cms: Mapping[str, Mapping[str, Any]],
    ) -> dict[str, commit.Held[LedgerT]]:
        def labelled(name: str, label: str) -> Mapping[str, Any] | None:
            cm = cms.get(name)
            return cm if cm is not None and _labels(cm).get(label) == "true" else None

        return {
            k: self._hold(kind, k, labelled(kind.name_of(k), kind.label),
                          labelled(kind.record_of(k), kind.record_label), counted)
            for k in keys
        }  # fmt: skip

    def _hold_one(
        self, kind: _Kind[LedgerT], key: str, counted: Callable[[str], int]
    ) -> commit.Held[LedgerT]:
        published = self._read_config_map(kind.name_of(key))  # first: see `commit.hold`
        record = self._read_config_map(kind.record_of(key))
        return self._hold(kind, key, published, record, counted)

    def _hold(
        self,
        kind: _Kind[LedgerT],
        key: str,
        published: Mapping[str, Any] | None,
        record: Mapping[str, Any] | None,
        counted: Callable[[str], int],
    ) -> commit.Held[LedgerT]:
        def copy(cm: Mapping[str, Any] | None) -> commit.Copy[LedgerT] | None:
            if cm is None:
                return None
            meta = _meta(cm)
            as_dict = {
                "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                             "labels": _labels(cm)},
                "data": dict(cm.get("data") or {}),
            }  # fmt: skip
            version = str(meta.get("resourceVersion") or "")
            return commit.Copy(version, kind.read(as_dict, key, kind.data_key))

        return commit.hold(
            kind.fresh(key),
            copy(published),
            copy(record),
            names=(self._where(kind.name_of(key)), self._where(kind.record_of(key))),
            counted=lambda: counted(key),
        )

    def _where(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    def _counted_view(
        self, config_maps: Mapping[str, Mapping[str, Any]] | None = None
    ) -> dict[str, int]:
        """The ledger sequence the fleet view last counted per cluster: what tells a ledger whose
        copies are both gone from one never written. From `config_maps`, the ledgers' own
        reading (the view's parts and the ledgers are one namespace's ConfigMaps, read at one
        version), else listed. A part that does not read counts nothing."""
        if config_maps is None:
            listed = self.core.list_namespaced_config_map(
                self.namespace, label_selector=f"{fleet_view.VIEW_LABEL}=true"
            )
            config_maps = {str(i): self._as_dict(c) for i, c in enumerate(listed.items)}
        parts = [
            {"metadata": {"name": _meta(cm).get("name")}, "binaryData": cm.get("binaryData") or {}}
            for cm in config_maps.values()
            if _labels(cm).get(fleet_view.VIEW_LABEL) == "true"
        ]
        views, unreadable = fleet_view.read(parts)
        if unreadable:
            log.warning("fleet view parts %s do not read", ", ".join(unreadable))
        return {name: v.ledger for name, v in views.items()}

    def namespaces(self) -> dict[str, dict[str, str]]:
        """Every Namespace's labels (fences and quotas select namespaces by them)."""
        return {_meta(n).get("name") or "": _labels(n) for n in self.reads.objects(NAMESPACES)}

    def _after(
        self, config_maps: Mapping[str, Mapping[str, Any]], plural: str
    ) -> list[dict[str, Any]]:
        """Every object of a kind, at least as new as each ledger copy in `config_maps`: what
        lets `commit.decide` release the entry of a replica the list lacks (it is gone, not yet
        seen), as a pass always listed them after reading its ledgers."""
        return self.reads.objects_since(plural, _newest_ledger(config_maps))

    # --- writes ---------------------------------------------------------------------------

    def write_ledger(
        self,
        kind: _Kind[LedgerT],
        key: str,
        held: commit.Held[LedgerT],
        state: pydantic.BaseModel,
        changed: bool,
    ) -> bool:
        """Writes `state` (the decision on `held`) to the ledger's record, then to its published
        copy, each by compare-and-swap at the version read (creating a copy that is gone). False
        when another writer got to either first: re-read and decide again."""
        text = state.model_dump_json()
        if changed or held.write_record:
            labels = {kind.record_label: "true"}
            if not self._swap_config_map(
                kind.record_of(key), labels, {kind.data_key: text}, held.record
            ):
                return False
        if changed or held.publish:
            labels = {kind.label: "true"}
            if not self._swap_config_map(
                kind.name_of(key), labels, {kind.data_key: text}, held.published
            ):
                return False
        return True

    def write_quota_status(self, quota: Mapping[str, Any], state: quotas.QuotaLedger) -> None:
        """status.used (devices per class, and cache storage in bytes when capped),
        status.namespaces, status.replicas, status.caches: what `kubectl get inferencequota`
        shows beside spec.hard."""
        used = state.used()
        classes = sorted((set(used) | set(state.hard)) - {quotas.CACHE_STORAGE})
        caches = sum(1 for k in state.entries if quotas.CACHE_KEY_PREFIX in k)
        status: dict[str, Any] = {
            "used": {"devices": {c: used.get(c, 0) for c in classes}},
            "namespaces": list(state.namespaces),
            "replicas": len(state.entries) - caches,
        }
        if quotas.CACHE_STORAGE in state.hard or caches:
            status["used"]["cacheStorage"] = used.get(quotas.CACHE_STORAGE, 0)
            status["caches"] = caches
        seen = quota.get("status") or {}
        if all(seen.get(k) == v for k, v in status.items()):
            return
        try:
            written = self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, "inferencequotas", quota["metadata"]["name"],
                {"status": status}, field_manager=FIELD_MANAGER,
            )  # fmt: skip
        except ApiException as err:
            if err.status != 404:
                raise
            return
        self.reads.wrote("inferencequotas", api_map(written))

    def _swap_config_map(
        self,
        name: str,
        labels: Mapping[str, str],
        data: Mapping[str, str],
        resource_version: str | None,
    ) -> bool:
        """Creates the ConfigMap (no `resource_version`) or replaces it at exactly that
        version; False if another writer got there first."""
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=name,
                namespace=self.namespace,
                labels=dict(labels),
                resource_version=resource_version,
            ),
            data=dict(data),
        )
        try:
            if resource_version is None:
                written = self.core.create_namespaced_config_map(
                    self.namespace, body, field_manager=FIELD_MANAGER
                )
            else:
                written = self.core.replace_namespaced_config_map(
                    name, self.namespace, body, field_manager=FIELD_MANAGER
                )
        except ApiException as err:
            # Conflict (stale resourceVersion), AlreadyExists, or deleted since it was read
            if err.status == 409 or (err.status == 404 and resource_version is not None):
                return False
            raise
        self.reads.wrote(CONFIGMAPS, self._as_dict(written))
        return True

    def annotate(self, key: str, uid: str, writes: Mapping[str, str | None]) -> None:
        namespace, name = key.split("/", 1)
        # The uid precondition: never annotate a re-created replica of the same name.
        patch = {"metadata": {"uid": uid, "annotations": dict(writes)}}
        try:
            written = self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "modelreplicas", name, patch,
                field_manager=FIELD_MANAGER,
            )  # fmt: skip
        except ApiException as err:
            if err.status not in (404, 409, 422):  # gone or re-created (uid): next pass sees it
                raise
            return
        self.reads.wrote("modelreplicas", api_map(written))

    # --- a pass ---------------------------------------------------------------------------

    def bind_once(self) -> list[ClusterOutcome]:
        """One pass (the module's docstring): read, reserve each quota, refuse what tenancy
        keeps off, bind each cluster, then write what others read (the fleet view, the nudges,
        each quota's status)."""
        seen = self._read_pass()
        closed = {n: h.closed for n, h in seen.ledgers.items() if h.closed is not None}
        closed_quotas = {n: h.closed for n, h in seen.quota_ledgers.items() if h.closed is not None}
        decided = self._reserve_quotas(seen, set(closed), closed_quotas)
        fenced = commit.tenancy_refusals(seen.replicas, seen.clusters, seen.namespaces)
        # before any commit: a replica is bound only into a namespace its cluster prepares
        self.publish_tenants(seen.clusters, seen.replicas, fenced)
        refuse = {
            **commit.quota_refusals(seen.replicas, decided),
            **commit.closed_quota_refusals(
                seen.inference_quotas, closed_quotas, seen.replicas, seen.namespaces
            ),
            **fenced,
        }
        outcomes, committed = self._bind_clusters(seen, refuse, closed)
        self._refuse_unknown_clusters(seen.replicas, set(seen.clusters))
        self.write_view(seen.clusters, seen.classes, committed, closed, seen.config_maps)
        self.nudge(seen.clusters, seen.replicas, set(closed))
        self._publish_quotas(seen, decided)
        return outcomes

    def _read_pass(self) -> _PassReads:
        """What a pass decides from: the clusters (their health and nodes published first, when
        it probes), classes, quotas and namespaces; then every ledger (a forgotten one started
        again, the quota ledgers of deleted quotas removed); then the replicas, and the caches
        when a quota weighs them."""
        objects = self.reads.objects
        clusters = {c["metadata"]["name"]: c for c in objects("inferenceclusters")}
        if self.prober is not None:
            self.prober.watch(clusters)
            clusters = self.publish_health(clusters, self.prober.streaks())
            clusters = self.publish_nodes(clusters, self.prober.nodes())
        classes = {c["metadata"]["name"]: c for c in objects("inferenceclasses")}
        listed_quotas = {q["metadata"]["name"]: q for q in objects("inferencequotas")}
        namespaces = self.namespaces()
        # the ledgers first, then the replicas (`_after`)
        cms = self.reads.config_maps()
        counted = _Lazy(lambda: self._counted_view(cms))
        read = self.read_ledgers(set(clusters), lambda c: counted().get(c, 0), cms)
        for name in sorted(self.forget_lost & set(clusters)):
            read[name] = self._forgotten(name, read[name])
        quota_read = self.read_quota_ledgers(
            set(listed_quotas), lambda q: _quota_counted(listed_quotas[q]), cms
        )
        self._remove_orphan_quota_ledgers(set(listed_quotas), cms)
        replicas = [commit.Replica.of(o) for o in self._after(cms, "modelreplicas")]
        caches = self._caches(listed_quotas.values(), cms)
        return _PassReads(
            clusters=clusters,
            classes=classes,
            inference_quotas=listed_quotas,
            namespaces=namespaces,
            config_maps=cms,
            counted=counted,
            ledgers=read,
            quota_ledgers=quota_read,
            replicas=replicas,
            caches=caches,
        )

    def _reserve_quotas(
        self,
        seen: _PassReads,
        closed: set[str],
        closed_quotas: Mapping[str, commit.Closed],
    ) -> list[commit.QuotaDecision]:
        """Each quota's reservations (`_reserve`), a quota whose ledger does not read left
        out: before any cluster commits, which counts on them."""
        return [
            self._reserve(
                seen.inference_quotas[name],
                seen.quota_ledgers[name],
                seen.replicas,
                seen.caches,
                seen.namespaces,
                clusters=seen.clusters,
                closed=set(closed),
            )
            for name in sorted(set(seen.inference_quotas) - set(closed_quotas))
        ]

    def _bind_clusters(
        self,
        seen: _PassReads,
        refuse: Mapping[str, str],
        closed: dict[str, commit.Closed],
    ) -> tuple[list[ClusterOutcome], dict[str, ledger.Ledger]]:
        """Binds each cluster in turn (`_bind_cluster`): the outcomes, and every ledger as
        committed. `closed` gains each cluster whose ledger turned out unreadable, and each whose
        binding failed with no ledger read."""
        outcomes = []
        committed: dict[str, ledger.Ledger] = {}
        for name in sorted(seen.clusters):
            outcome = ClusterOutcome(name)
            try:
                committed[name] = self._bind_cluster(
                    seen.clusters[name],
                    seen.classes,
                    seen.ledgers[name],
                    seen.replicas,
                    outcome,
                    refuse=refuse,
                )
            except Exception as err:  # one cluster's failure must not stop the others
                outcome.error = f"{type(err).__name__}: {err}"
                log.warning("%s", outcome.line())
                state = seen.ledgers[name].state
                if state is not None:
                    committed[name] = state  # what it held when read: still committed
                else:
                    closed.setdefault(
                        name, commit.Closed("", outcome.error, seen.counted().get(name, 0))
                    )
            if outcome.closed is not None:
                closed[name] = outcome.closed
            outcomes.append(outcome)
            self._report_cluster(seen.clusters[name], outcome.closed, outcome.rebuilt)
        return outcomes, committed

    def _publish_quotas(self, seen: _PassReads, decided: list[commit.QuotaDecision]) -> None:
        """Each quota's status where its reservations were written, and its ledger's Events."""
        for d in decided:
            if d.written:
                self.write_quota_status(seen.inference_quotas[d.ledger.quota], d.ledger)
        for name in sorted(seen.inference_quotas):
            held = seen.quota_ledgers[name]
            self._report_quota(seen.inference_quotas[name], held.closed, held.rebuilt)

    # --- cluster health ---------------------------------------------------------------------

    def publish_health(
        self,
        clusters: Mapping[str, dict[str, Any]],
        streaks: Mapping[str, probe.Streak | None],
    ) -> dict[str, dict[str, Any]]:
        """Writes each cluster's health where it changed (the `plnt.work/cluster-health`
        annotation, a merge patch) with an Event on the change; returns the clusters as they are
        now, so this pass's fleet view carries it."""
        out: dict[str, dict[str, Any]] = dict(clusters)
        for name, obj in sorted(clusters.items()):
            previous = cluster_health.record_of(obj)
            record = probe.publish(
                previous, streaks.get(name), failures=self.failures, successes=self.successes
            )
            if record is None or record == previous:
                continue
            annotated = self._annotate_cluster(
                obj, cluster_health.ANNOTATION, record.to_annotation(), "health"
            )
            if annotated is None:
                continue
            out[name] = annotated
            if previous is None and record.reachable:
                continue  # first seen answering: nothing changed for anyone
            if record.reachable:
                why, said = (
                    "ClusterReachable",
                    f"its API server answers again (since {record.since})",
                )
            else:
                why = record.reason or "ClusterUnreachable"
                said = f"its API server has not answered since {record.since}: {record.message}"
            self._event("InferenceCluster", obj, why, said, not record.reachable)
        return out

    def publish_nodes(
        self,
        clusters: Mapping[str, dict[str, Any]],
        seen: Mapping[str, pool_nodes.Observation | None],
    ) -> dict[str, dict[str, Any]]:
        """Writes each cluster's counted pool nodes where they changed (the `plnt.work/ready-nodes`
        annotation, a merge patch), with an Event when the pools it offers less of change;
        returns the clusters as they are now, so this pass's ledgers and fleet view count them."""
        out: dict[str, dict[str, Any]] = dict(clusters)
        for name, obj in sorted(clusters.items()):
            previous = pool_nodes.record_of(obj)
            record = pool_nodes.publish(previous, seen.get(name))
            if record is None or record == previous:
                continue
            annotated = self._annotate_cluster(
                obj, pool_nodes.ANNOTATION, record.to_annotation(), "pool nodes"
            )
            if annotated is None:
                continue
            out[name] = annotated
            before, after = offer.cluster_of(obj).reduced, offer.cluster_of(out[name]).reduced
            if before == after:
                continue
            if after:
                said = "; ".join(f"pool {p}: {why}" for p, why in sorted(after.items()))
                self._event("InferenceCluster", obj, "PoolCapacityReduced", said, True)
            else:
                said = "every pool has the nodes its spec says"
                self._event("InferenceCluster", obj, "PoolCapacityRestored", said, False)
        return out

    def publish_tenants(
        self,
        clusters: Mapping[str, Mapping[str, Any]],
        replicas: Iterable[commit.Replica],
        fenced: Mapping[str, str],
    ) -> None:
        """Writes on each cluster the namespaces whose replicas share objects there (the
        `plnt.work/tenant-namespaces` annotation, a merge patch, where it changed): every
        namespace with a ModelReplica naming the cluster that the cluster's fence admits."""
        wanted: dict[str, set[str]] = {name: set() for name in clusters}
        for r in replicas:
            if r.cluster in wanted and r.key not in fenced:
                wanted[r.cluster].add(r.namespace)
        for name, obj in sorted(clusters.items()):
            value = workload_cluster.tenant_namespaces_value(wanted[name])
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            if annotations.get(workload_cluster.TENANT_NAMESPACES, "") == value:
                continue
            try:
                written = self.custom.patch_cluster_custom_object(
                    GROUP, VERSION, "inferenceclusters", name,
                    {"metadata": {"annotations": {workload_cluster.TENANT_NAMESPACES: value}}},
                    field_manager=FIELD_MANAGER,
                )  # fmt: skip
                self.reads.wrote("inferenceclusters", api_map(written))
            except ApiException as err:
                log.warning("cluster %s: tenant namespaces not written: HTTP %s", name, err.status)

    def nudge(
        self,
        clusters: Mapping[str, Mapping[str, Any]],
        replicas: Iterable[commit.Replica],
        closed: Collection[str] = (),
    ) -> None:
        """Marks each replica of a cluster whose health, or whether its ledger reads, changed
        (after the fleet view carries it), so it and its ModelDeployment reconcile now rather
        than at their next poll: a serving replica polls rarely. The mark is a trigger (a
        tenant may write it too), never read as health or as a binding."""
        tokens = {
            name: cluster_health.nudge(
                cluster_health.degradation(obj), ledger_closed=name in closed
            )
            for name, obj in clusters.items()
        }
        for r in replicas:
            token = tokens.get(r.cluster)
            if token is None or token == r.health_nudge:
                continue
            if not r.health_nudge and token == cluster_health.nudge(None):
                continue  # never marked, healthy: nothing to say
            self.annotate(r.key, r.uid, {cluster_health.REPLICA_NUDGE: token})

    def _forgotten(
        self, cluster: str, held: commit.Held[ledger.Ledger]
    ) -> commit.Held[ledger.Ledger]:
        """A lost ledger started again, on the operator's word (`--forget-lost-ledger`): empty,
        at the last sequence counted, both copies written in this pass, so the published copy
        goes from missing to holding every replica that fits, never to empty. Any other ledger
        is left as it is."""
        closed = held.closed
        if closed is None or closed.reason != commit.LEDGER_LOST:
            log.warning("cluster %s: its ledger is not lost; nothing forgotten", cluster)
            return held
        log.warning("cluster %s: its lost ledger is forgotten; its replicas bind again", cluster)
        return commit.Held(
            ledger.Ledger(cluster=cluster, sequence=closed.sequence),
            None,
            None,
            write_record=True,
            publish=True,
            rebuilt=f"{self._where(ledger_name(cluster))} and its record, started again empty",
            forgotten=True,
        )

    def _caches(
        self, specs: Iterable[Mapping[str, Any]], config_maps: Mapping[str, Mapping[str, Any]]
    ) -> list[commit.Replica]:
        """The ModelCaches as quotas weigh them, when some quota caps cache storage (else none
        is read: nothing counts them)."""
        if not any(quotas.CACHE_STORAGE in commit.quota_terms(q)[1] for q in specs):
            return []
        return [commit.Replica.of_cache(o) for o in self._after(config_maps, "modelcaches")]

    def _reserve(
        self,
        quota: Mapping[str, Any],
        held: commit.Held[quotas.QuotaLedger],
        replicas: list[commit.Replica],
        caches: list[commit.Replica],
        namespaces: Mapping[str, Mapping[str, str]],
        *,
        clusters: Mapping[str, Mapping[str, Any]],
        closed: set[str],
    ) -> commit.QuotaDecision:
        """One quota's reservations, written by compare-and-swap (a conflict re-reads the quota
        ledger and the replicas); returns the decision as written, or one reserving nothing new
        when the ledger kept changing or turned unreadable. Replicas on a `closed` cluster
        reserve nothing new: nothing binds there."""
        name = quota["metadata"]["name"]
        for _ in range(MAX_ATTEMPTS):
            state = held.state
            if state is None:
                break
            # A cache claims storage on its cluster whatever that cluster's ledger holds, so a
            # closed ledger does not keep it from a reservation; a fence does.
            weighed = [*replicas, *caches]
            fenced = commit.tenancy_refusals(weighed, clusters, namespaces)
            eligible = {
                r.key for r in replicas if r.cluster in clusters and r.cluster not in closed
            } | {c.key for c in caches if c.cluster in clusters}
            decision = commit.decide_quota(
                state, quota, weighed, namespaces, eligible=eligible - set(fenced)
            )
            if self.write_ledger(QUOTA_LEDGERS, name, held, decision.ledger, decision.changed):
                return decision
            # first the ledger, then the list
            held = self.read_quota_ledger(name, lambda _: _quota_counted(quota))
            replicas[:] = [commit.Replica.of(o) for o in self._list("modelreplicas")]
            if caches:  # read this pass: some quota caps cache storage
                caches[:] = [commit.Replica.of_cache(o) for o in self._list("modelcaches")]
        log.warning("InferenceQuota %s: its ledger kept changing or does not read; nothing new "
                    "reserved", name)  # fmt: skip
        # Every replica of the namespaces it covers and has not reserved waits: no commit may
        # count on a reservation this pass could not make.
        state = held.state or quotas.QuotaLedger(quota=name)
        cover = sorted(
            set(state.namespaces) | set(commit.covered(quota, [*replicas, *caches], namespaces))
        )
        return commit.QuotaDecision(
            state.model_copy(update={"namespaces": cover}), False, {}, written=False
        )

    # --- the fleet view ---------------------------------------------------------------------

    def write_view(
        self,
        clusters: Mapping[str, Mapping[str, Any]],
        classes: Mapping[str, Mapping[str, Any]],
        committed: Mapping[str, ledger.Ledger],
        closed: Mapping[str, commit.Closed] | None = None,
        config_maps: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[fleet_view.Part]:
        """Writes the fleet view of these ledgers (a `closed` cluster offers nothing, with
        why): first the parts that gain clusters, then the
        parts that only lose some, then the index, last deletes parts no longer in it. So a
        cluster moving between parts (its labels changed) is in one of them at every moment;
        a reader between the writes may see it in both, at the same ledger sequence."""
        parts = fleet_view.parts(commit.views(clusters, classes, committed, closed))
        cms = self.reads.config_maps() if config_maps is None else config_maps
        held = {n: cm for n, cm in cms.items() if _labels(cm).get(fleet_view.VIEW_LABEL) == "true"}

        def payload(cm: Mapping[str, Any] | None) -> str | None:
            value = (cm.get("binaryData") or {}).get(fleet_view.DATA_KEY) if cm else None
            return value if isinstance(value, str) else None  # base64, as the API serves it

        def losing(part: fleet_view.Part) -> bool:
            return not fleet_view.cluster_names(payload(held.get(part.name))) <= set(part.names)

        changed = [p for p in parts if payload(held.get(p.name)) != p.payload]
        for part in sorted(changed, key=losing):
            self._put_config_map(
                part.name,
                part.labels,
                binary={fleet_view.DATA_KEY: part.payload},
                exists=part.name in held,
            )
        index = cms.get(fleet_view.INDEX_NAME)
        text = fleet_view.index_text(parts)
        if index is None or (index.get("data") or {}).get(fleet_view.INDEX_KEY) != text:
            self._put_config_map(
                fleet_view.INDEX_NAME,
                {},
                data={fleet_view.INDEX_KEY: text},
                exists=index is not None,
            )
        for name in sorted(set(held) - {p.name for p in parts}):
            try:
                self.core.delete_namespaced_config_map(name, self.namespace)
            except ApiException as err:
                if err.status != 404:
                    raise
            self.reads.deleted(CONFIGMAPS, (self.namespace, name))
        return parts

    def _read_config_map(self, name: str) -> dict[str, Any] | None:
        """A ConfigMap of the ledger namespace read fresh (a GET), None when there is none."""
        try:
            return self._as_dict(self.core.read_namespaced_config_map(name, self.namespace))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def _put_config_map(
        self,
        name: str,
        labels: Mapping[str, str],
        *,
        data: Mapping[str, str] | None = None,
        binary: Mapping[str, str] | None = None,  # base64 values
        exists: bool,
    ) -> None:
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name, namespace=self.namespace, labels=dict(labels)),
            data=dict(data) if data is not None else None,
            binary_data=dict(binary) if binary is not None else None,
        )
        # Last writer wins: any binder's view is one the function may read (a stale one only
        # makes proposals the binder refuses), so a view part another binder created or deleted
        # meanwhile is written the other way once, then left to the next pass.
        for _ in range(2):
            try:
                if exists:
                    written = self.core.replace_namespaced_config_map(
                        name, self.namespace, body, field_manager=FIELD_MANAGER
                    )
                else:
                    written = self.core.create_namespaced_config_map(
                        self.namespace, body, field_manager=FIELD_MANAGER
                    )
                self.reads.wrote(CONFIGMAPS, self._as_dict(written))
                return
            except ApiException as err:
                if err.status not in (404, 409):
                    raise
                log.debug("fleet view %s: %s by another writer", name, err.reason)
                exists = not exists

    def _bind_cluster(
        self,
        cluster: Mapping[str, Any],
        classes: Mapping[str, Mapping[str, Any]],
        held: commit.Held[ledger.Ledger],
        replicas: list[commit.Replica],
        outcome: ClusterOutcome,
        *,
        refuse: Mapping[str, str] | None = None,
    ) -> ledger.Ledger:
        """Binds the cluster's proposals; returns the ledger as committed (or as last read, when
        it is unreadable: then `outcome.closed` says why and the proposals are refused).

        Every write follows a read it cannot outdate: the ledger is replaced at the version it
        was decided from, and annotations that come with no ledger write (a binding a crash left
        unwritten, a refusal) are decided again from the ledger read fresh, since the pass's
        copy may lag another binder's commit."""
        name = cluster["metadata"]["name"]
        last = ledger.Ledger(cluster=name)
        fresh = False  # `held` and `replicas` were read just now, not at the start of the pass
        for _ in range(MAX_ATTEMPTS):
            state = held.state
            if state is None:
                if self._refuse_closed_ledger(name, held, replicas, outcome, fresh=fresh):
                    return last
            else:
                last = state
                decision, mine = _decide_cluster(
                    cluster, classes, state, replicas, refuse, forgotten=held.forgotten
                )
                if self._write_decision(name, held, decision, mine, outcome, fresh=fresh):
                    return decision.ledger if decision.changed else state
            held = self.read_ledger(name)  # first the ledger, then the list
            replicas = [commit.Replica.of(o) for o in self._list("modelreplicas")]
            fresh = True
        outcome.error = f"the ledger kept changing ({MAX_ATTEMPTS} conflicts)"
        return last

    def _refuse_closed_ledger(
        self,
        cluster: str,
        held: commit.Held[ledger.Ledger],
        replicas: list[commit.Replica],
        outcome: ClusterOutcome,
        *,
        fresh: bool,
    ) -> bool:
        """Refuses the proposals of a cluster whose ledger cannot be read (`_refuse_closed`);
        False, refusing nothing, when that would annotate replicas from the pass's copy of the
        ledger: read it again first."""
        closed = held.closed
        assert closed is not None
        if not fresh and commit.refuse_closed(cluster, closed, replicas)[1]:
            return False
        self._refuse_closed(cluster, closed, replicas, outcome)
        return True

    def _write_decision(
        self,
        cluster: str,
        held: commit.Held[ledger.Ledger],
        decision: commit.Decision,
        mine: list[commit.Replica],
        outcome: ClusterOutcome,
        *,
        fresh: bool,
    ) -> bool:
        """Writes the decision's ledger, then its annotations on the cluster's replicas (`mine`),
        and records it in `outcome`. False, writing nothing, when it would annotate with no ledger
        write from the pass's copy of the ledger, and when another writer changed the ledger
        first (a conflict): read again and decide again."""
        writing = decision.changed or held.write_record or held.publish
        if decision.annotate and not writing and not fresh:
            return False
        if not self.write_ledger(CLUSTER_LEDGERS, cluster, held, decision.ledger, decision.changed):
            outcome.conflicts += 1
            return False
        outcome.rebuilt = held.rebuilt
        if self.crash_after_ledger_write and decision.changed and decision.annotate:
            self._crash(cluster, sorted(decision.annotate))
        uids = {r.key: r.uid for r in mine}
        for key, writes in sorted(decision.annotate.items()):
            self.annotate(key, uids[key], writes)
        outcome.bound, outcome.refused, outcome.over = (
            len(decision.bound),
            decision.refused,
            decision.over,
        )
        return True

    def _crash(self, cluster: str, unannotated: list[str]) -> None:
        log.critical(
            "%s is set: exiting after the ledger write of cluster %s, before annotating %s",
            CRASH_AFTER_LEDGER_WRITE, cluster, ", ".join(unannotated),
        )  # fmt: skip
        logging.shutdown()
        os._exit(CRASH_EXIT_CODE)  # no cleanup, as a crash

    def _refuse_closed(
        self,
        cluster: str,
        closed: commit.Closed,
        replicas: list[commit.Replica],
        outcome: ClusterOutcome,
    ) -> None:
        """Commits nothing on a cluster whose ledger cannot be read (`commit.refuse_closed`)."""
        outcome.closed = closed
        outcome.refused, annotate = commit.refuse_closed(cluster, closed, replicas)
        uids = {r.key: r.uid for r in replicas}
        for key, writes in sorted(annotate.items()):
            self.annotate(key, uids[key], writes)

    def _remove_orphan_quota_ledgers(
        self, listed: set[str], config_maps: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """Deletes the quota ledgers (both copies) of InferenceQuotas that are gone, so nothing
        waits on a reservation that can never change. The quotas are listed again first, and
        each ConfigMap is deleted only at the version seen: a quota created meanwhile keeps its
        ledger."""
        found = {
            name: str(_meta(cm).get("resourceVersion") or "")
            for name, cm in config_maps.items()
            if any(_labels(cm).get(k) == "true" for k in (quotas.QUOTA_LEDGER_LABEL,
                                                          QUOTA_RECORD_LABEL))
        }  # fmt: skip

        def kept(wanted: set[str]) -> set[str]:
            return {f(q) for q in wanted for f in (quotas.quota_ledger_name, quota_record_name)}

        orphans = set(found) - kept(listed)
        if not orphans:
            return
        orphans -= kept({q["metadata"]["name"] for q in self._list("inferencequotas")})
        for name in sorted(orphans):
            try:
                self.core.delete_namespaced_config_map(
                    name,
                    self.namespace,
                    body=client.V1DeleteOptions(
                        preconditions=client.V1Preconditions(resource_version=found[name])
                    ),
                )
                log.info("quota ledger %s removed: its InferenceQuota is gone", name)
            except ApiException as err:
                if err.status not in (404, 409):
                    raise
                if err.status == 409:
                    continue
            self.reads.deleted(CONFIGMAPS, (self.namespace, name))

    # --- what people see ------------------------------------------------------------------

    def _report_cluster(
        self, obj: Mapping[str, Any], closed: commit.Closed | None, rebuilt: str
    ) -> None:
        self._report("InferenceCluster", obj, closed, rebuilt)

    def _report_quota(
        self, obj: Mapping[str, Any], closed: commit.Closed | None, rebuilt: str
    ) -> None:
        self._report("InferenceQuota", obj, closed, rebuilt)

    def _report(
        self, kind: str, obj: Mapping[str, Any], closed: commit.Closed | None, rebuilt: str
    ) -> None:
        """An Event on the InferenceCluster (or InferenceQuota) when its ledger turns unreadable
        (Warning, the reason plnt.capacity.ledger_parse gives, LedgerDiverged or LedgerLost, naming
        the ConfigMap and the fault), when it
        reads again (Normal LedgerRepaired) and when a lost copy is rebuilt (Normal
        LedgerRebuilt). Once per change: a process remembers what it said."""
        name = obj["metadata"]["name"]
        key = (kind, name)
        said = self._said.get(key)
        if closed is not None:
            if said != closed.message:
                self._event(kind, obj, closed.reason or "LedgerUnreadable", closed.message, True)
                self._said[key] = closed.message
            return
        if said is not None:
            self._event(kind, obj, "LedgerRepaired", "its ledger reads again: binding resumes",
                        False)  # fmt: skip
            del self._said[key]
        if rebuilt:
            self._event(kind, obj, "LedgerRebuilt", f"rebuilt {rebuilt}", False)

    def _annotate_cluster(
        self, obj: dict[str, Any], key: str, value: str, what: str
    ) -> dict[str, Any] | None:
        """Writes one annotation on an InferenceCluster; the object as written, or None (logged)
        when the API server refused it."""
        name = (obj.get("metadata") or {}).get("name", "")
        try:
            written = self.custom.patch_cluster_custom_object(
                GROUP, VERSION, "inferenceclusters", name,
                {"metadata": {"annotations": {key: value}}},
                field_manager=FIELD_MANAGER,
            )  # fmt: skip
            self.reads.wrote("inferenceclusters", api_map(written))
        except ApiException as err:
            log.warning("cluster %s: %s not written: HTTP %s", name, what, err.status)
            return None
        meta = dict(obj.get("metadata") or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), key: value}
        return {**obj, "metadata": meta}

    def _event(self, kind: str, obj: Mapping[str, Any], reason: str, message: str,
               warning: bool) -> None:  # fmt: skip
        log.log(logging.WARNING if warning else logging.INFO, "%s %s: %s: %s", kind,
                obj["metadata"]["name"], reason, message)  # fmt: skip
        meta = obj["metadata"]
        now = datetime.datetime.now(datetime.UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                generate_name=f"{meta['name']}.", namespace=EVENT_NAMESPACE
            ),
            involved_object=client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}", kind=kind, name=meta["name"],
                uid=meta.get("uid"), resource_version=meta.get("resourceVersion"),
            ),
            reason=reason, message=message, type="Warning" if warning else "Normal",
            source=client.V1EventSource(component=COMPONENT), reporting_component=COMPONENT,
            reporting_instance=self.instance, first_timestamp=now, last_timestamp=now, count=1,
        )  # fmt: skip
        try:
            self.core.create_namespaced_event(EVENT_NAMESPACE, body)
        except ApiException as err:  # an Event is for people: binding goes on without it
            log.warning("Event on %s %s not written: HTTP %s", kind, meta["name"], err.status)

    def _refuse_unknown_clusters(self, replicas: list[commit.Replica], known: set[str]) -> None:
        for r in replicas:
            if r.cluster in known or r.state.state == binding.BOUND:
                continue
            value = binding.refusal_json(
                r.state.digest, f"cluster {r.cluster} is not an InferenceCluster"
            )
            if r.refused_annotation != value:
                self.annotate(r.key, r.uid, {binding.REFUSED: value})


def _decide_cluster(
    cluster: Mapping[str, Any],
    classes: Mapping[str, Mapping[str, Any]],
    state: ledger.Ledger,
    replicas: list[commit.Replica],
    refuse: Mapping[str, str] | None,
    *,
    forgotten: bool,
) -> tuple[commit.Decision, list[commit.Replica]]:
    """The cluster's next ledger (`commit.decide` on `state`, a ledger `forgotten` when the
    operator started it again), and the cluster's replicas among `replicas`, which the
    decision's annotations go on."""
    name = cluster["metadata"]["name"]
    pools = commit.pools_of(cluster, classes)
    mine = [r for r in replicas if r.cluster == name]
    # A forgotten ledger binds first the replicas that were bound there (by their
    # annotations: they are most likely serving); all are proposals, checked as any.
    first = frozenset(r.key for r in mine if forgotten and r.state.state == binding.BOUND)
    decision = commit.decide(
        state, mine, pools, alive={r.uid for r in replicas}, refuse=refuse, first=first
    )
    return decision, mine


class _Lazy:
    """A value computed once, when first asked for (the fleet view is read only when some
    cluster's ledger copies are both gone)."""

    def __init__(self, make: Callable[[], dict[str, int]]) -> None:
        self._make = make
        self._value: dict[str, int] | None = None

    def __call__(self) -> dict[str, int]:
        if self._value is None:
            self._value = self._make()
        return self._value


def _quota_counted(quota: Mapping[str, Any]) -> int:
    """1 when the binder's status on an InferenceQuota shows a reservation it made (its ledger
    existed then), else 0."""
    status = quota.get("status") or {}
    used = ((status.get("used") or {}).get("devices")) or {}
    try:
        reserved = int(status.get("replicas") or 0) > 0 or any(int(v) > 0 for v in used.values())
    except (TypeError, ValueError, AttributeError):
        reserved = True  # a status it cannot read: assume the ledger held something
    return 1 if reserved else 0


def summary(outcomes: list[ClusterOutcome]) -> str:
    return json.dumps(
        {
            o.cluster: {"bound": o.bound, "refused": len(o.refused), "over": len(o.over)}
            for o in outcomes
        },
        sort_keys=True,
    )
