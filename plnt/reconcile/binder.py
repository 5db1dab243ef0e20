"""The binder: commits proposed ModelReplicas to per-cluster ledgers, as kube-scheduler binds pods.

One pass: list InferenceClusters and InferenceClasses; list every ledger ConfigMap
(`<namespace>/plnt-ledger-<cluster>`, one call); then list every ModelReplica (after the
ledgers, which is what lets `ledger.decide` release entries of deleted replicas); per cluster,
decide, write the ledger with the resourceVersion it was read at (create when there was none),
and only after that write succeeded, annotate the replicas (binding, refusal, over-commit). A
conflict (another binder, or a concurrent pass) re-reads that cluster's ledger and the replicas
and decides again. Last, the fleet view (`plnt.fleet_view`) of the ledgers as committed: what the
ModelDeployment function schedules on instead of the whole fleet.

Tenancy (plnt.tenancy, docs/tenancy.md): before the clusters, every InferenceQuota's quota
ledger (`plnt-quota-<name>`, same namespace) is decided and written the same way, so no two
binders reserve past `hard`; a cluster then never commits a replica its fence
(`spec.namespaceSelector`, over the Namespaces' labels) keeps off, nor one a quota covering its
namespace has not reserved. Each InferenceQuota's status (used, namespaces) is written last.

Writes are merge patches of annotations (field manager plnt-binder) and ConfigMap
create/replace; the ModelReplica's spec is never touched.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pydantic
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from plnt import binding, contracts, fleet_view, tenancy
from plnt.reconcile import ledger as ledgers
from plnt.reconcile.kube import api_map

LedgerT = TypeVar("LedgerT", bound=pydantic.BaseModel)

log = logging.getLogger(__name__)

GROUP, VERSION = contracts.MODELPLANE_GROUP, contracts.MODELPLANE_VERSION
FIELD_MANAGER = "plnt-binder"
LEDGER_LABEL = binding.LEDGER_LABEL
MAX_ATTEMPTS = 8  # per cluster and pass; a conflict means someone else made progress


def _meta(obj: client.V1ConfigMap | client.V1Namespace) -> client.V1ObjectMeta:
    """Metadata of an object read from the API server, which always sends it."""
    if obj.metadata is None:
        raise ValueError("an object without metadata from the API server")
    return obj.metadata


ledger_name = binding.ledger_name


@dataclasses.dataclass
class ClusterOutcome:
    cluster: str
    bound: int = 0
    refused: dict[str, str] = dataclasses.field(default_factory=dict)
    over: dict[str, str] = dataclasses.field(default_factory=dict)
    conflicts: int = 0
    error: str = ""

    def line(self) -> str:
        text = f"cluster {self.cluster}: {self.bound} bound, {len(self.refused)} refused"
        text += f", {len(self.over)} over-committed, {self.conflicts} conflicts"
        for key, why in sorted(self.refused.items()):
            text += f"; refused {key}: {why}"
        for key, why in sorted(self.over.items()):
            text += f"; over-committed {key}: {why}"
        return text + (f" [error: {self.error}]" if self.error else "")


class Binder:
    def __init__(self, api: client.ApiClient, namespace: str = "plnt-system") -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace

    # --- reads ----------------------------------------------------------------------------

    def _list(self, plural: str) -> list[dict[str, Any]]:
        listed = api_map(self.custom.list_cluster_custom_object(GROUP, VERSION, plural))
        return listed.get("items", [])

    def read_ledgers(self, clusters: set[str]) -> dict[str, tuple[ledgers.Ledger, str | None]]:
        """Every ledger in one list call (a pass costs the same on 1 or 1,000 clusters); a
        cluster without one gets an empty ledger and None."""
        return self._list_ledgers(
            clusters,
            label=LEDGER_LABEL,
            data_key=ledgers.DATA_KEY,
            model=ledgers.Ledger,
            key_field="cluster",
            name_of=ledger_name,
        )

    def read_ledger(self, cluster: str) -> tuple[ledgers.Ledger, str | None]:
        """The ledger and its resourceVersion; an empty one and None when there is none yet."""
        try:
            cm = self.core.read_namespaced_config_map(ledger_name(cluster), self.namespace)
        except ApiException as err:
            if err.status == 404:
                return ledgers.Ledger(cluster=cluster), None
            raise
        raw = (cm.data or {}).get(ledgers.DATA_KEY) or "{}"
        parsed = ledgers.Ledger.model_validate_json(raw)
        if parsed.cluster != cluster:
            raise ValueError(f"ConfigMap {_meta(cm).name} is the ledger of {parsed.cluster!r}")
        return parsed, _meta(cm).resource_version

    def read_quota_ledgers(
        self, quotas: set[str]
    ) -> dict[str, tuple[tenancy.QuotaLedger, str | None]]:
        """Every quota ledger in one list call; a quota without one gets an empty one and None."""
        return self._list_ledgers(
            quotas,
            label=tenancy.QUOTA_LEDGER_LABEL,
            data_key=tenancy.QUOTA_DATA_KEY,
            model=tenancy.QuotaLedger,
            key_field="quota",
            name_of=tenancy.quota_ledger_name,
        )

    def _list_ledgers(
        self,
        keys: set[str],
        *,
        label: str,
        data_key: str,
        model: type[LedgerT],
        key_field: str,
        name_of: Callable[[str], str],
    ) -> dict[str, tuple[LedgerT, str | None]]:
        """The ledgers labelled `label`, by key, with their resourceVersions. A ConfigMap that
        does not parse, or sits under another ledger's name, is ignored: tenants cannot write in
        this namespace, so it is an operator's mistake, not an attack."""
        listed = self.core.list_namespaced_config_map(
            self.namespace, label_selector=f"{label}=true"
        )
        out: dict[str, tuple[LedgerT, str | None]] = {
            k: (model.model_validate({key_field: k}), None) for k in keys
        }
        for cm in listed.items:
            raw = (cm.data or {}).get(data_key) or "{}"
            try:
                parsed = model.model_validate_json(raw)
            except ValueError:
                log.warning("ConfigMap %s is not a %s; ignored", _meta(cm).name, model.__name__)
                continue
            key = getattr(parsed, key_field)
            if key in keys and _meta(cm).name == name_of(key):
                out[key] = (parsed, _meta(cm).resource_version)
        return out

    def read_quota_ledger(self, quota: str) -> tuple[tenancy.QuotaLedger, str | None]:
        try:
            cm = self.core.read_namespaced_config_map(
                tenancy.quota_ledger_name(quota), self.namespace
            )
        except ApiException as err:
            if err.status == 404:
                return tenancy.QuotaLedger(quota=quota), None
            raise
        raw = (cm.data or {}).get(tenancy.QUOTA_DATA_KEY) or "{}"
        return tenancy.QuotaLedger.model_validate_json(raw), _meta(cm).resource_version

    def namespaces(self) -> dict[str, dict[str, str]]:
        """Every Namespace's labels (fences and quotas select namespaces by them)."""
        listed = self.core.list_namespace()
        return {_meta(n).name or "": dict(_meta(n).labels or {}) for n in listed.items}

    # --- writes ---------------------------------------------------------------------------

    def write_quota_ledger(self, state: tenancy.QuotaLedger, resource_version: str | None) -> bool:
        """Compare-and-swap, as `write_ledger`."""
        cm = tenancy.quota_ledger_configmap(state, self.namespace)
        return self._swap_config_map(
            cm["metadata"]["name"], cm["metadata"]["labels"], cm["data"], resource_version
        )

    def write_quota_status(self, quota: Mapping[str, Any], state: tenancy.QuotaLedger) -> None:
        """status.used (devices per class), status.namespaces, status.replicas: what
        `kubectl get inferencequota` shows beside spec.hard."""
        used = state.used()
        status = {
            "used": {"devices": {c: used.get(c, 0) for c in sorted(set(used) | set(state.hard))}},
            "namespaces": list(state.namespaces),
            "replicas": len(state.entries),
        }
        seen = quota.get("status") or {}
        if all(seen.get(k) == v for k, v in status.items()):
            return
        try:
            self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, "inferencequotas", quota["metadata"]["name"],
                {"status": status}, field_manager=FIELD_MANAGER,
            )  # fmt: skip
        except ApiException as err:
            if err.status != 404:
                raise

    def write_ledger(self, state: ledgers.Ledger, resource_version: str | None) -> bool:
        """Compare-and-swap: False if the ledger moved on since `resource_version`."""
        return self._swap_config_map(
            ledger_name(state.cluster),
            {LEDGER_LABEL: "true"},
            {ledgers.DATA_KEY: state.model_dump_json()},
            resource_version,
        )

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
                self.core.create_namespaced_config_map(
                    self.namespace, body, field_manager=FIELD_MANAGER
                )
            else:
                self.core.replace_namespaced_config_map(
                    name, self.namespace, body, field_manager=FIELD_MANAGER
                )
        except ApiException as err:
            if err.status == 409:  # Conflict (stale resourceVersion) or AlreadyExists
                return False
            raise
        return True

    def annotate(self, key: str, uid: str, writes: Mapping[str, str | None]) -> None:
        namespace, name = key.split("/", 1)
        # The uid precondition: never annotate a re-created replica of the same name.
        patch = {"metadata": {"uid": uid, "annotations": dict(writes)}}
        try:
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "modelreplicas", name, patch,
                field_manager=FIELD_MANAGER,
            )  # fmt: skip
        except ApiException as err:
            if err.status not in (404, 409, 422):  # gone or re-created (uid): next pass sees it
                raise

    # --- a pass ---------------------------------------------------------------------------

    def bind_once(self) -> list[ClusterOutcome]:
        clusters = {c["metadata"]["name"]: c for c in self._list("inferenceclusters")}
        classes = {c["metadata"]["name"]: c for c in self._list("inferenceclasses")}
        quotas = {q["metadata"]["name"]: q for q in self._list("inferencequotas")}
        namespaces = self.namespaces()
        read = self.read_ledgers(set(clusters))  # the ledgers first, then the replicas
        quota_read = self.read_quota_ledgers(set(quotas))
        replicas = [ledgers.Replica.of(o) for o in self._list("modelreplicas")]
        decided: list[ledgers.QuotaDecision] = []
        for name in sorted(quotas):
            decided.append(
                self._reserve(quotas[name], quota_read[name], replicas, namespaces, clusters)
            )
        fenced = ledgers.tenancy_refusals(replicas, clusters, namespaces)
        refuse = {**ledgers.quota_refusals(replicas, decided), **fenced}
        outcomes = []
        committed: dict[str, ledgers.Ledger] = {}
        for name in sorted(clusters):
            outcome = ClusterOutcome(name)
            try:
                committed[name] = self._bind_cluster(
                    clusters[name], classes, read[name], replicas, outcome, refuse=refuse
                )
            except Exception as err:  # one cluster's failure must not stop the others
                outcome.error = f"{type(err).__name__}: {err}"
                log.warning("%s", outcome.line())
                committed[name] = read[name][0]  # what it held when read: still committed
            outcomes.append(outcome)
        self._refuse_unknown_clusters(replicas, set(clusters))
        self.write_view(clusters, classes, committed)
        for d in decided:
            self.write_quota_status(quotas[d.ledger.quota], d.ledger)
        return outcomes

    def _reserve(
        self,
        quota: Mapping[str, Any],
        read: tuple[tenancy.QuotaLedger, str | None],
        replicas: list[ledgers.Replica],
        namespaces: Mapping[str, Mapping[str, str]],
        clusters: Mapping[str, Mapping[str, Any]],
    ) -> ledgers.QuotaDecision:
        """One quota's reservations, written by compare-and-swap (a conflict re-reads the quota
        ledger and the replicas); returns the decision as written, or one reserving nothing new
        when the ledger kept changing."""
        name = quota["metadata"]["name"]
        state, version = read
        for _ in range(MAX_ATTEMPTS):
            fenced = ledgers.tenancy_refusals(replicas, clusters, namespaces)
            eligible = {r.key for r in replicas if r.cluster in clusters} - set(fenced)
            decision = ledgers.decide_quota(state, quota, replicas, namespaces, eligible=eligible)
            if not decision.changed or self.write_quota_ledger(decision.ledger, version):
                return decision
            state, version = self.read_quota_ledger(name)  # first the ledger, then the list
            replicas[:] = [ledgers.Replica.of(o) for o in self._list("modelreplicas")]
        log.warning("InferenceQuota %s: its ledger kept changing; nothing new reserved", name)
        return ledgers.QuotaDecision(state, False, {})

    # --- the fleet view ---------------------------------------------------------------------

    def write_view(
        self,
        clusters: Mapping[str, Mapping[str, Any]],
        classes: Mapping[str, Mapping[str, Any]],
        committed: Mapping[str, ledgers.Ledger],
    ) -> list[fleet_view.Part]:
        """Writes the fleet view of these ledgers: first the parts that gain clusters, then the
        parts that only lose some, then the index, last deletes parts no longer in it. So a
        cluster moving between parts (its labels changed) is in one of them at every moment;
        a reader between the writes may see it in both, at the same ledger sequence."""
        parts = fleet_view.parts(ledgers.views(clusters, classes, committed))
        listed = self.core.list_namespaced_config_map(
            self.namespace, label_selector=f"{fleet_view.VIEW_LABEL}=true"
        )
        held = {_meta(cm).name or "": cm for cm in listed.items}

        def payload(cm: client.V1ConfigMap | None) -> str | None:
            value = (cm.binary_data or {}).get(fleet_view.DATA_KEY) if cm is not None else None
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
        index = self._read_config_map(fleet_view.INDEX_NAME)
        text = fleet_view.index_text(parts)
        if index is None or (index.data or {}).get(fleet_view.INDEX_KEY) != text:
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
        return parts

    def _read_config_map(self, name: str) -> client.V1ConfigMap | None:
        try:
            return self.core.read_namespaced_config_map(name, self.namespace)
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
                    self.core.replace_namespaced_config_map(
                        name, self.namespace, body, field_manager=FIELD_MANAGER
                    )
                else:
                    self.core.create_namespaced_config_map(
                        self.namespace, body, field_manager=FIELD_MANAGER
                    )
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
        read: tuple[ledgers.Ledger, str | None],
        replicas: list[ledgers.Replica],
        outcome: ClusterOutcome,
        *,
        refuse: Mapping[str, str] | None = None,
    ) -> ledgers.Ledger:
        """Binds the cluster's proposals; returns the ledger as committed."""
        name = cluster["metadata"]["name"]
        state, version = read
        for _ in range(MAX_ATTEMPTS):
            pools = ledgers.pools_of(cluster, classes)
            mine = [r for r in replicas if r.cluster == name]
            decision = ledgers.decide(
                state, mine, pools, alive={r.uid for r in replicas}, refuse=refuse
            )
            if decision.changed and not self.write_ledger(decision.ledger, version):
                outcome.conflicts += 1
                state, version = self.read_ledger(name)  # first the ledger, then the list
                replicas = [ledgers.Replica.of(o) for o in self._list("modelreplicas")]
                continue
            uids = {r.key: r.uid for r in mine}
            for key, writes in sorted(decision.annotate.items()):
                self.annotate(key, uids[key], writes)
            outcome.bound, outcome.refused, outcome.over = (
                len(decision.bound),
                decision.refused,
                decision.over,
            )
            return decision.ledger if decision.changed else state
        outcome.error = f"the ledger kept changing ({MAX_ATTEMPTS} conflicts)"
        return state

    def _refuse_unknown_clusters(self, replicas: list[ledgers.Replica], known: set[str]) -> None:
        for r in replicas:
            if r.cluster in known or r.state.state == binding.BOUND:
                continue
            value = binding.refusal_json(
                r.state.digest, f"cluster {r.cluster} is not an InferenceCluster"
            )
            if r.refused_annotation != value:
                self.annotate(r.key, r.uid, {binding.REFUSED: value})


def summary(outcomes: list[ClusterOutcome]) -> str:
    return json.dumps(
        {
            o.cluster: {"bound": o.bound, "refused": len(o.refused), "over": len(o.over)}
            for o in outcomes
        },
        sort_keys=True,
    )
