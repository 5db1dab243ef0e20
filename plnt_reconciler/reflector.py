"""A list-then-watch cache of one kind of object (a reflector, as client-go calls it).

`Reflector.run` lists the kind once, then follows a watch from the list's resourceVersion
(with bookmarks, so the version it has seen keeps moving while nothing changes). It lists again
whenever the watch fails: the version is too old for the API server (410 Gone), the connection
drops, the API server restarts. Until that list answers, `synced` is clear and readers are told
the cache is not current (`NotCurrentError`), as a list that fails tells them today.

Objects are kept as the API server serves them (JSON maps), keyed by (namespace, name).
`wrote` folds in an object the caller has just written (the write's answer), so the next read
sees it even before its watch event arrives; an object is never replaced by an older version of
itself, so a late event cannot undo such a write.

Versions are compared as integers: the API server's resourceVersions are etcd revisions, one
counter for every kind stored in one etcd (client-go's integer mutation cache reads them the
same way). `version()` is None when a version is not an integer; callers then read fresh.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name); namespace "" for a cluster-scoped kind


class NotCurrentError(RuntimeError):
    """A cache read while its watch is down and its list has not answered again."""


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def revision(value: object) -> int | None:
    """A resourceVersion as the etcd revision it is, None when it is not one."""
    try:
        return int(str(value))
    except ValueError:
        return None


def _version_of(obj: dict[str, Any]) -> int | None:
    return revision((obj.get("metadata") or {}).get("resourceVersion"))


def _newer(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether `new` may replace `old`: not when both versions read and `new`'s is lower."""
    if old is None:
        return True
    was, now = _version_of(old), _version_of(new)
    return was is None or now is None or now >= was


def raw_json(response: Any) -> dict[str, Any]:
    """The body of a call made with `_preload_content=False`, as a JSON map."""
    try:
        body = json.loads(response.read())
    finally:
        release = getattr(response, "release_conn", None)
        if release is not None:
            release()
    if not isinstance(body, dict):
        raise TypeError(f"expected a JSON object from the API server, got {type(body).__name__}")
    return body


class Reflector:
    """One kind, listed then watched. `call` is the client's list method for it (as
    `watch.Watch().stream` takes it) and `args` its positional arguments."""

    def __init__(
        self,
        name: str,
        call: Callable[..., Any],
        *args: Any,
        watch_timeout_seconds: int = 300,
        backoff_seconds: float = 1.0,
        on_change: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:
        self.name = name
        self.call, self.args, self.kwargs = call, args, kwargs
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff_seconds = backoff_seconds
        self.on_change = on_change
        self.synced = threading.Event()
        self.lists = 0  # lists made: once at start, then once per failed watch
        self._items: dict[Key, dict[str, Any]] = {}
        self._version: str = ""
        self._lock = threading.Lock()
        self._stream: watch.Watch | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- reads ----------------------------------------------------------------------------

    def items(self) -> list[dict[str, Any]]:
        """Every object, as last seen; NotCurrentError while the cache is not current."""
        with self._lock:
            self._check()
            return list(self._items.values())

    def items_by_key(self) -> dict[Key, dict[str, Any]]:
        with self._lock:
            self._check()
            return dict(self._items)

    def get(self, key: Key) -> dict[str, Any] | None:
        with self._lock:
            self._check()
            return self._items.get(key)

    def version(self) -> int | None:
        """The newest version seen (the list's, then each event's and bookmark's): every change
        to this kind up to it is in the cache."""
        with self._lock:
            self._check()
            return revision(self._version)

    def _check(self) -> None:
        if not self.synced.is_set():
            raise NotCurrentError(f"the cache of {self.name} is not current: its watch is down")

    # --- what the caller wrote ------------------------------------------------------------

    def wrote(self, obj: dict[str, Any]) -> None:
        """An object as a write just returned it."""
        with self._lock:
            key = key_of(obj)
            if _newer(self._items.get(key), obj):
                self._items[key] = obj

    def deleted(self, key: Key) -> None:
        """An object the caller just deleted (its watch event follows)."""
        with self._lock:
            self._items.pop(key, None)

    # --- list and watch -------------------------------------------------------------------

    def relist(self) -> str:
        """Lists the kind and makes the cache that list (keeping what the caller wrote since);
        the watch, if one runs, goes on past the list's version."""
        body = raw_json(self.call(*self.args, _preload_content=False, **self.kwargs))
        listed = {key_of(o): o for o in body.get("items") or []}
        version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        at = revision(version)
        with self._lock:
            # What the caller wrote after the list's snapshot stays (the watch brings it again).
            for key, obj in self._items.items():
                mine, kept = _version_of(obj), listed.get(key)
                if at is not None and mine is not None and mine > at and _newer(kept, obj):
                    listed[key] = obj
            changed = listed != self._items
            self._items = listed
            self._version = version
            self.lists += 1
        self.synced.set()
        if changed and self.on_change is not None:
            self.on_change()
        return version

    def apply(self, event: dict[str, Any]) -> None:
        """Folds one watch event into the cache. An event at or below the version the cache
        has (a list made while the watch ran already holds it) changes nothing."""
        kind, obj = event.get("type"), event.get("object") or {}
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            if self._holds(version):
                return
            changed = self._fold(kind, obj)
            if version:
                self._version = version
        if changed and self.on_change is not None:
            self.on_change()

    def _holds(self, version: str) -> bool:
        """Whether the cache is already at `version` or past it (both read as revisions)."""
        at, now = revision(self._version), revision(version)
        return at is not None and now is not None and now <= at

    def _fold(self, kind: object, obj: dict[str, Any]) -> bool:
        """Applies one event of type `kind` to the objects held (the lock held); whether they
        changed."""
        if kind in ("ADDED", "MODIFIED"):
            return self._put(obj)
        if kind == "DELETED":
            return self._drop(obj)
        if kind == "BOOKMARK":
            return False
        raise ValueError(f"watch of {self.name}: unexpected event type {kind!r}")

    def _put(self, obj: dict[str, Any]) -> bool:
        key = key_of(obj)
        held = self._items.get(key)
        if not _newer(held, obj) or held == obj:
            return False
        self._items[key] = obj
        return True

    def _drop(self, obj: dict[str, Any]) -> bool:
        key = key_of(obj)
        held = self._items.get(key)
        if held is None or not _newer(held, obj):
            return False
        del self._items[key]
        return True

    def events(self, version: str) -> Iterator[dict[str, Any]]:
        """The watch from `version` until the API server ends it (its timeout); an ERROR event
        (410 Gone: the version is too old) raises ApiException."""
        self._stream = watch.Watch()
        stream: Iterable[dict[str, Any]] = self._stream.stream(
            self.call,
            *self.args,
            resource_version=version,
            timeout_seconds=self.watch_timeout_seconds,
            allow_watch_bookmarks=True,
            deserialize=False,
            # a connection that stays silent past the server's timeout is dead: list again
            _request_timeout=(10, self.watch_timeout_seconds + 60),
            **self.kwargs,
        )
        yield from stream

    def run(self, stop: threading.Event | None = None) -> None:
        """List, then watch from that version, until `stop`; list again after any failure."""
        stop = stop or self._stop
        version: str | None = None
        while not stop.is_set():
            try:
                if version is None:
                    version = self.relist()
                for event in self.events(version):
                    self.apply(event)
                    version = self._version
                    if stop.is_set():
                        return
                # the server's timeout ended the watch: go on from the last version seen
            except Exception as err:
                if stop.is_set():
                    return
                self.synced.clear()
                version = None
                if isinstance(err, ApiException) and err.status == 410:
                    log.info("watch of %s expired: listing again", self.name)
                else:
                    log.warning("watch of %s failed (%s): listing again", self.name, _why(err))
                stop.wait(self.backoff_seconds)

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.run, args=(self._stop,), name=f"watch-{self.name}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _why(err: Exception) -> str:
    if isinstance(err, ApiException):
        return f"HTTP {err.status} {err.reason or ''}".strip()
    return type(err).__name__
