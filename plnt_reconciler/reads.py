"""What a binder pass reads from the management API server, and where from.

`Listed` lists each kind when asked (a single pass: `plnt reconcile --bind-only --once`).
`Watched` keeps each kind in a list-then-watch cache (plnt_reconciler.reflector), so a pass of the
long-running binder makes no list call at all: it reads the InferenceClusters, InferenceClasses,
InferenceQuotas, ModelReplicas, ModelCaches, Namespaces and the ConfigMaps of the ledger
namespace (the ledgers, their records and the fleet view) from memory, and wakes early when
one of them changes. ModelCaches are watched from the first pass that weighs them (a quota caps
cache storage), as they were listed only then.

Writes stay with the binder, optimistic as ever: a ledger is replaced only at the
resourceVersion it was decided from, so a cache that lags can cost a conflict (the binder then
reads that ledger fresh), never a write. The binder folds what its writes return into the caches
(`wrote`), so its next pass starts from its own writes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from kubernetes import client

from plnt import contracts
from plnt_reconciler import reflector
from plnt_reconciler.reflector import Key, Reflector

GROUP, VERSION = contracts.MODELPLANE_GROUP, contracts.MODELPLANE_VERSION
# The custom kinds the binder reads; Namespaces and ConfigMaps are core.
CUSTOM = (
    "inferenceclusters",
    "inferenceclasses",
    "inferencequotas",
    "modelreplicas",
    "modelcaches",
)
NAMESPACES, CONFIGMAPS = "namespaces", "configmaps"
LAZY = frozenset({"modelcaches"})  # watched from the first read
SYNC_SECONDS = 10.0  # how long a first read of a lazy kind waits for its list


class Reads(Protocol):
    def objects(self, plural: str) -> list[dict[str, Any]]:
        """Every object of a custom kind (CUSTOM) or of NAMESPACES."""
        ...

    def config_maps(self) -> dict[str, dict[str, Any]]:
        """The ConfigMaps of the ledger namespace, by name."""
        ...

    def objects_since(self, plural: str, version: int | None) -> list[dict[str, Any]]:
        """`objects(plural)` holding every change up to `version` (a resourceVersion read
        before; None: unknown, so listed again)."""
        ...

    def wrote(self, plural: str, obj: dict[str, Any]) -> None: ...

    def deleted(self, plural: str, key: Key) -> None: ...


class Listed:
    """Every read is a list call, made when asked: always as new as what was read before."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace

    def objects(self, plural: str) -> list[dict[str, Any]]:
        return list(reflector.raw_json(_lister(self, plural)(_preload_content=False))["items"])

    def config_maps(self) -> dict[str, dict[str, Any]]:
        listed = reflector.raw_json(_lister(self, CONFIGMAPS)(_preload_content=False))
        return {reflector.key_of(cm)[1]: cm for cm in listed.get("items") or []}

    def objects_since(self, plural: str, version: int | None) -> list[dict[str, Any]]:
        return self.objects(plural)  # listed now: after whatever was read before

    def wrote(self, plural: str, obj: dict[str, Any]) -> None:
        pass

    def deleted(self, plural: str, key: Key) -> None:
        pass


def _lister(reads: Listed | Watched, plural: str) -> Callable[..., Any]:
    """The list call of a kind (as `watch.Watch().stream` takes it), its arguments bound."""
    if plural == NAMESPACES:
        return reads.core.list_namespace
    if plural == CONFIGMAPS:
        return lambda **kw: reads.core.list_namespaced_config_map(reads.namespace, **kw)
    if plural not in CUSTOM:
        raise ValueError(f"the binder reads no {plural}")
    return lambda **kw: reads.custom.list_cluster_custom_object(GROUP, VERSION, plural, **kw)


class Watched:
    """Each kind in a Reflector, started by `start` (ModelCaches: by their first read)."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        *,
        watch_timeout_seconds: int = 300,
        backoff_seconds: float = 1.0,
    ) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.changed = threading.Event()  # set by any change a watch brings
        self._lock = threading.Lock()
        self._started = False
        self.reflectors = {
            plural: Reflector(
                plural,
                _lister(self, plural),
                watch_timeout_seconds=watch_timeout_seconds,
                backoff_seconds=backoff_seconds,
                on_change=self.changed.set,
            )
            for plural in (*CUSTOM, NAMESPACES, CONFIGMAPS)
        }
        self._running: set[str] = set()

    def start(self) -> None:
        for plural in self.reflectors:
            if plural not in LAZY:
                self._run(plural)

    def _run(self, plural: str) -> Reflector:
        with self._lock:
            r = self.reflectors[plural]
            if plural not in self._running:
                self._running.add(plural)
                r.start()
        return r

    def wait_synced(self, timeout: float) -> list[str]:
        """Waits up to `timeout` for every cache a pass always reads to be current; the kinds
        still not (a lazy kind not current fails only the passes that read it)."""
        always = sorted(p for p in self._running if p not in LAZY)
        for plural in always:
            self.reflectors[plural].synced.wait(timeout)
        return [p for p in always if not self.reflectors[p].synced.is_set()]

    def wait_changed(self, timeout: float) -> bool:
        """Waits up to `timeout` for a change; whether one came (and clears it)."""
        came = self.changed.wait(timeout)
        self.changed.clear()
        return came

    def _current(self, plural: str) -> Reflector:
        r = self._run(plural)
        if plural in LAZY:
            r.synced.wait(SYNC_SECONDS)
        return r

    def objects(self, plural: str) -> list[dict[str, Any]]:
        return self._current(plural).items()

    def config_maps(self) -> dict[str, dict[str, Any]]:
        return {k[1]: cm for k, cm in self._current(CONFIGMAPS).items_by_key().items()}

    def objects_since(self, plural: str, version: int | None) -> list[dict[str, Any]]:
        """From the cache when its watch has brought every change up to `version`; else the
        cache lists again first (a kind nothing changes in only hears of newer versions from
        bookmarks, about once a minute)."""
        r = self._current(plural)
        seen = r.version()
        if version is None or seen is None or seen < version:
            r.relist()
        return r.items()

    def wrote(self, plural: str, obj: dict[str, Any]) -> None:
        self.reflectors[plural].wrote(obj)

    def deleted(self, plural: str, key: Key) -> None:
        self.reflectors[plural].deleted(key)

    def close(self) -> None:
        for plural in sorted(self._running):
            self.reflectors[plural].close()
