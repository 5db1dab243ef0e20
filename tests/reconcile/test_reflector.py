"""The list-then-watch cache (plnt_reconciler.reflector) against a real kube-apiserver: a list,
then ADDED, MODIFIED and DELETED from the watch; a watch the server expires (410) or that fails
lists again; bookmarks move the version only; a write folded in is never undone by an older
event; and the binder's watched reads, which make a pass at rest cost no list call."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from plnt.capacity import binding
from plnt_reconciler import binder, kube, reads
from plnt_reconciler.reflector import NotCurrentError, Reflector
from tests.reconcile.apiserver import ADMIN_TOKEN, RECONCILER_TOKEN
from tests.reconcile.test_binder import (  # noqa: F401 - fixtures
    bound_gpus,
    cluster_name,
    fleet_crds,
    make_replica,
    states,
)


@pytest.fixture(scope="module")
def admin(kube_apiserver, tmp_path_factory):
    path = tmp_path_factory.mktemp("kubeconfig") / "admin"
    api = kube.api_client(str(kube_apiserver.kubeconfig(path, ADMIN_TOKEN)))
    yield api
    api.close()


@pytest.fixture(scope="module")
def api(kube_apiserver, tmp_path_factory):
    path = tmp_path_factory.mktemp("kubeconfig") / "reconciler"
    api = kube.api_client(str(kube_apiserver.kubeconfig(path, RECONCILER_TOKEN)))
    yield api
    api.close()


@pytest.fixture
def namespace(admin):
    name = f"watch-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(admin).create_namespace(client.V1Namespace(metadata={"name": name}))
    return name


def config_map(name: str, value: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"v": value})


def until(check: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the time limit"
        time.sleep(0.05)


def values(r: Reflector) -> dict[str, str]:
    return {cm["metadata"]["name"]: cm["data"]["v"] for cm in r.items()}


class Recording(Reflector):
    """A Reflector that keeps every event it folds in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[str, str]] = []

    def apply(self, event: dict[str, Any]) -> None:
        self.seen.append((event["type"], event["object"]["metadata"].get("name", "")))
        super().apply(event)


def reflector_of(admin, namespace: str, kind: type[Reflector] = Reflector, **kw) -> Reflector:
    core = client.CoreV1Api(admin)
    kw.setdefault("backoff_seconds", 0.1)
    return kind(
        "configmaps", lambda **kwargs: core.list_namespaced_config_map(namespace, **kwargs), **kw
    )


def test_lists_then_follows_added_modified_and_deleted(admin, namespace):
    core = client.CoreV1Api(admin)
    core.create_namespaced_config_map(namespace, config_map("a", "1"))
    changes = threading.Event()
    r = reflector_of(admin, namespace, Recording, on_change=changes.set)
    assert isinstance(r, Recording)
    with pytest.raises(NotCurrentError):
        r.items()  # nothing listed yet
    r.start()
    try:
        assert r.synced.wait(20)
        assert values(r) == {"a": "1"}
        listed_at = r.version()
        assert listed_at is not None and r.lists == 1
        changes.clear()
        core.create_namespaced_config_map(namespace, config_map("b", "2"))
        core.replace_namespaced_config_map("a", namespace, config_map("a", "3"))
        core.delete_namespaced_config_map("b", namespace)
        until(lambda: ("DELETED", "b") in r.seen)
        assert values(r) == {"a": "3"}
        assert r.seen == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
        assert changes.is_set()
        assert (r.version() or 0) > listed_at
        assert r.lists == 1  # one list: the rest came from the watch
    finally:
        r.close()


class ExpiresOnce(Reflector):
    """Its first watch ends as `watch.Watch` ends one the API server expired: an ERROR event
    with code 410 (the version is older than the server keeps) raised as ApiException."""

    expired = False

    def events(self, version: str) -> Iterator[dict[str, Any]]:
        if not self.expired:
            self.expired = True
            raise ApiException(status=410, reason="Expired: too old resource version")
        yield from super().events(version)


def test_an_expired_watch_lists_again(admin, namespace):
    core = client.CoreV1Api(admin)
    core.create_namespaced_config_map(namespace, config_map("before", "1"))
    r = reflector_of(admin, namespace, ExpiresOnce)
    r.start()
    try:
        until(lambda: r.lists == 2 and r.synced.is_set())
        core.create_namespaced_config_map(namespace, config_map("after", "2"))
        until(lambda: "after" in values(r))
        assert values(r) == {"before": "1", "after": "2"}
        assert r.lists == 2
    finally:
        r.close()


class FailsOnce(Reflector):
    """Its first watch breaks as a dropped connection does, after the cache was listed."""

    failed = False

    def events(self, version: str) -> Iterator[dict[str, Any]]:
        if not self.failed:
            self.failed = True
            self.dropped_at = version
            raise ConnectionResetError("connection dropped")
        yield from super().events(version)


def test_a_dropped_watch_lists_again_and_misses_nothing(admin, namespace):
    core = client.CoreV1Api(admin)
    r = reflector_of(admin, namespace, FailsOnce, backoff_seconds=1.0)
    r.start()
    try:
        until(lambda: r.lists == 1)
        # made while the watch is down: the second list brings it
        core.create_namespaced_config_map(namespace, config_map("meanwhile", "1"))
        until(lambda: r.lists == 2 and r.synced.is_set())
        assert values(r) == {"meanwhile": "1"}
    finally:
        r.close()


def test_a_kind_that_cannot_be_listed_is_never_current(admin):
    custom = client.CustomObjectsApi(admin)
    r = Reflector(
        "nothings",
        lambda **kw: custom.list_cluster_custom_object("example.com", "v1", "nothings", **kw),
        backoff_seconds=0.1,
    )
    r.start()
    try:
        time.sleep(0.5)
        assert not r.synced.is_set()
        with pytest.raises(NotCurrentError):
            r.items()
    finally:
        r.close()


def cm(name: str, version: int, value: str = "x") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "n", "resourceVersion": str(version)},
            "data": {"v": value}}  # fmt: skip


class Canned:
    """A list call that answers a fixed list."""

    def __init__(self, items: list[dict[str, Any]], version: int) -> None:
        self.body = {"items": items, "metadata": {"resourceVersion": str(version)}}

    def __call__(self, **kwargs: Any) -> Any:
        import io
        import json

        return io.BytesIO(json.dumps(self.body).encode())


def test_bookmarks_move_the_version_and_change_nothing():
    changes: list[int] = []
    r = Reflector("configmaps", Canned([cm("a", 5)], 7), on_change=lambda: changes.append(1))
    r.relist()
    changes.clear()
    r.apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}})
    assert r.version() == 12
    assert [o["metadata"]["name"] for o in r.items()] == ["a"]
    assert changes == []
    # a list made while the watch ran (at 12) already holds what the watch brings up to it
    r.apply({"type": "ADDED", "object": cm("ghost", 11)})
    assert ("n", "ghost") not in {(o["metadata"]["namespace"], o["metadata"]["name"])
                                  for o in r.items()}  # fmt: skip
    r.apply({"type": "MODIFIED", "object": cm("a", 13, "y")})
    assert (r.version(), changes) == (13, [1])


def test_an_older_event_never_undoes_a_write():
    r = Reflector("configmaps", Canned([cm("a", 5)], 7))
    r.relist()
    r.wrote(cm("a", 10, "mine"))
    r.apply({"type": "MODIFIED", "object": cm("a", 9, "older")})  # still on its way
    r.apply({"type": "DELETED", "object": cm("a", 9, "older")})
    assert r.get(("n", "a")) == cm("a", 10, "mine")
    r.apply({"type": "MODIFIED", "object": cm("a", 10, "mine")})  # the write's own event
    r.wrote(cm("b", 11, "new"))
    r.call = Canned([cm("a", 5)], 8)  # a list from before both writes
    r.relist()
    assert r.get(("n", "a")) == cm("a", 10, "mine")
    assert r.get(("n", "b")) == cm("b", 11, "new")
    r.call = Canned([], 20)  # a list after both were deleted
    r.relist()
    assert r.items() == []


# --- the binder's watched reads -----------------------------------------------------------


class Counting:
    """Counts the list and get calls a Binder makes through its own clients."""

    def __init__(self, b: binder.Binder) -> None:
        self.calls: list[str] = []
        for api in (b.custom, b.core):
            for name in dir(api):
                if name.startswith(("list_", "read_")) and not name.endswith("_with_http_info"):
                    setattr(api, name, self._counted(name, getattr(api, name)))

    def _counted(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return call(*args, **kwargs)

        return counted


@pytest.fixture
def watched(api, fleet_crds):  # noqa: F811
    w = reads.Watched(api, "plnt-system", backoff_seconds=0.2)
    w.start()
    try:
        assert w.wait_synced(20) == []
        yield w
    finally:
        w.close()


def test_a_watched_pass_at_rest_lists_nothing(kube_apiserver, api, watched, cluster_name):  # noqa: F811
    team = make_replica(kube_apiserver, cluster_name, 1)
    b = binder.Binder(api, reads=watched)
    count = Counting(b)
    until(lambda: any(o.cluster == cluster_name and o.bound for o in b.bind_once()))
    assert states(kube_apiserver, [team])[team].state == binding.BOUND
    held = binder.Binder(api).read_ledger(cluster_name)
    # What a pass writes is in the caches at once. A cache behind the ledgers lists again once
    # (a kind nothing changes in hears of newer versions only from bookmarks); after that a pass
    # at rest reads nothing from the API server and writes nothing.
    b.bind_once()
    lists = sum(r.lists for r in watched.reflectors.values())
    count.calls.clear()
    (outcome,) = [o for o in b.bind_once() if o.cluster == cluster_name]
    assert (outcome.bound, outcome.conflicts, outcome.error) == (1, 0, "")
    assert count.calls == [], count.calls
    assert sum(r.lists for r in watched.reflectors.values()) == lists
    again = binder.Binder(api).read_ledger(cluster_name)
    assert (again.published, again.record) == (held.published, held.record)
    # A replica created now is seen through the watch and bound by the next pass.
    other = make_replica(kube_apiserver, cluster_name, 2)
    until(lambda: any(o.cluster == cluster_name and o.bound == 2 for o in b.bind_once()))
    assert states(kube_apiserver, [other])[other].state == binding.BOUND


def test_a_stale_cache_costs_a_conflict_never_a_write(kube_apiserver, api, watched, cluster_name):  # noqa: F811
    def cached(team: str) -> bool:
        return any(o["metadata"]["namespace"] == team for o in watched.objects("modelreplicas"))

    first = make_replica(kube_apiserver, cluster_name, 5)
    until(lambda: cached(first))
    # The ledgers' cache stops here: it never hears of the commit another binder makes next.
    watched.reflectors["configmaps"].close()
    binder.Binder(api).bind_once()
    assert states(kube_apiserver, [first])[first].state == binding.BOUND
    second = make_replica(kube_apiserver, cluster_name, 5)
    until(lambda: cached(second))
    b = binder.Binder(api, reads=watched)
    (outcome,) = [o for o in b.bind_once() if o.cluster == cluster_name]
    # Decided from no ledger, it tries to create one holding both: refused, it reads the ledger
    # fresh and decides again from what the other binder committed.
    assert outcome.conflicts == 1
    found = states(kube_apiserver, [first, second])
    assert (found[first].state, found[second].state) == (binding.BOUND, binding.REFUSED_STATE)
    assert bound_gpus(found) == 5
    state = binder.Binder(api).read_ledger(cluster_name).state
    assert state is not None and sorted(state.entries) == [f"{first}/r-0"]
