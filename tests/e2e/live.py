"""Reading live objects back: conditions, waits, `kubectl get` tables and events."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from tests.e2e.kube import APIServer, wait_for

__all__ = ["APIServer", "wait_for"]


def condition(obj: Mapping[str, Any] | None, typ: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == typ:
            return cond
    return {}


def is_true(obj: Mapping[str, Any] | None, typ: str) -> bool:
    return condition(obj, typ).get("status") == "True"


def wait_object(
    api: APIServer,
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None = None,
    *,
    until: Callable[[dict[str, Any]], bool] = lambda obj: True,
    seconds: float = 120,
    what: str = "",
) -> dict[str, Any]:
    """The object once it exists and ``until`` holds for it."""
    last: dict[str, Any] = {}

    def check() -> dict[str, Any] | None:
        obj = api.get(api_version, kind, name, namespace)
        if obj is None:
            return None
        last.clear()
        last.update(obj)
        return obj if until(obj) else None

    try:
        return wait_for(check, seconds, what or f"{kind} {namespace or ''}/{name}")
    except TimeoutError as err:
        status = yaml.safe_dump((last or {}).get("status"), sort_keys=False)
        raise TimeoutError(f"{err}\nlast status:\n{status}") from None


def wait_ready(
    api: APIServer,
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None = None,
    seconds: float = 180,
) -> dict[str, Any]:
    return wait_object(
        api,
        api_version,
        kind,
        name,
        namespace,
        until=lambda o: is_true(o, "Ready"),
        seconds=seconds,
        what=f"{kind} {name} Ready",
    )


def table(text: str) -> tuple[list[str], list[list[str]]]:
    """`kubectl get` output as (header, rows). Cells are cut at the header's column starts,
    so an empty cell stays an empty string."""
    import re

    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return [], []
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    bounds = [*starts[1:], None]

    def cut(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in zip(starts, bounds, strict=True)]

    return cut(lines[0]), [cut(line) for line in lines[1:]]


def events_for(api: APIServer, namespace: str | None, name: str) -> list[dict[str, Any]]:
    out = []
    for event in api.list("v1", "Event", namespace=namespace):
        if (event.get("involvedObject") or {}).get("name") == name:
            out.append(event)
    return out


class Watch:
    """Records every value a field takes on one object, from the API server's watch stream (so
    a phase that lasts one reconcile is still seen), on a thread of its own."""

    def __init__(
        self,
        api: APIServer,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        field: Callable[[dict[str, Any]], Any],
    ) -> None:
        import threading

        self.api, self.field = api, field
        self.path = api.path(api_version, kind, namespace=namespace)
        self.name = name
        self.values: list[Any] = []
        self.objects: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import json

        import httpx

        version = ""
        while not self._stop.is_set():
            params = {
                "watch": "true",
                "fieldSelector": f"metadata.name={self.name}",
                "timeoutSeconds": "30",
            }
            if version:
                params["resourceVersion"] = version
            try:
                with self.api.http.stream("GET", self.path, params=params, timeout=60) as r:
                    for line in r.iter_lines():
                        if self._stop.is_set():
                            return
                        if not line:
                            continue
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            version = ""
                            break
                        version = (obj.get("metadata") or {}).get("resourceVersion", version)
                        value = self.field(obj)
                        self.objects.append(obj)
                        if not self.values or self.values[-1] != value:
                            self.values.append(value)
            except (httpx.HTTPError, ValueError):
                time.sleep(0.2)

    def stop(self) -> list[Any]:
        self._stop.set()
        self._thread.join(5)
        return self.values


def is_subsequence(wanted: list[Any], seen: list[Any]) -> bool:
    it = iter(seen)
    return all(any(v == w for v in it) for w in wanted)


class Timeline:
    """Seconds from an event (``start``, time.monotonic() when it happened; by default when
    the timeline is made) to the first look at which each step held."""

    def __init__(self, start: float | None = None) -> None:
        self.start = time.monotonic() if start is None else start
        self.seen: dict[str, float] = {}

    def mark(self, step: str, holds: bool) -> None:
        if holds and step not in self.seen:
            self.seen[step] = time.monotonic() - self.start

    def line(self, step: str) -> str:
        at = self.seen.get(step)
        return f"  {step:<40} {'never' if at is None else f'{at:6.1f} s'}"
