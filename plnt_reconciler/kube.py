"""The Kubernetes side: ModelDeployments in, scale writes, Events and the annotation out.

Reads go through a list-then-watch cache (`ModelDeploymentCache`) so each interval costs no
list call. Writes are the scale subresource (`spec.replicas`, with the resourceVersion read
just before as a precondition, so a concurrent writer wins and we retry next interval), a
core/v1 Event, and a merge patch of one annotation on the ModelDeployment. The annotation is
the only reason the reconciler may patch the ModelDeployment itself: the scale subresource
cannot carry metadata.
"""

from __future__ import annotations

import datetime
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from plnt import contracts, xp
from plnt.models.model_deployment import Autoscaling, check_autoscaling
from plnt_reconciler.decision import Decision, Deployment

log = logging.getLogger(__name__)

GROUP = contracts.MODELPLANE_GROUP
VERSION = contracts.MODELPLANE_VERSION
PLURAL = "modeldeployments"
KIND = "ModelDeployment"
ANNOTATION = "plnt.work/autoscale"
COMPONENT = "plnt-reconciler"
FIELD_MANAGER = "plnt-reconciler"


class InvalidAutoscalingError(ValueError):
    pass


def api_map(value: object) -> dict[str, Any]:
    """A custom-object call's answer: the client types it as `object`, the API sends a map."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object from the API server, got {type(value).__name__}")
    return value


def autoscaled(md: dict[str, Any], replicas: int) -> Deployment | None:
    """The decision inputs of a ModelDeployment, None if it does not ask for autoscaling.

    Raises InvalidAutoscalingError for a target that is present but unusable.
    """
    meta, spec = md.get("metadata", {}), md.get("spec") or {}
    raw = spec.get("autoscaling")
    if raw is None or (isinstance(raw, dict) and raw.get("targetTokensPerSecond") is None):
        return None  # anything else that is not a map is refused by the model, naming the field
    # The same model (and so the same bounds) the ModelDeployment function validates with.
    try:
        auto = xp.parse(Autoscaling, raw, "spec.autoscaling")
        check_autoscaling(auto)
    except xp.InvalidInput as err:
        raise InvalidAutoscalingError(str(err)) from None
    canary = ((md.get("status") or {}).get("revisions") or {}).get("canary") or ""
    return Deployment(
        namespace=meta["namespace"],
        name=meta["name"],
        replicas=replicas,
        min_replicas=1 if auto.min_replicas is None else auto.min_replicas,
        max_replicas=auto.max_replicas,
        target_tokens_per_second=auto.target_tokens_per_second,
        canary=canary if isinstance(canary, str) else "",
    )


@dataclass(frozen=True)
class Scale:
    replicas: int
    resource_version: str


# Every request says who sent it, so an API server's audit log (or a benchmark reading it) can
# tell the reconciler from other clients of the same library.
USER_AGENT = "plnt-reconcile"


def named(api: client.ApiClient) -> client.ApiClient:
    api.user_agent = USER_AGENT
    return api


def api_client(kubeconfig: str | None) -> client.ApiClient:
    """An API client from --kubeconfig, else in-cluster config, else the default kubeconfig."""
    if kubeconfig:
        return named(config.new_client_from_config(config_file=kubeconfig))
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return named(client.ApiClient())


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Kube:
    """Every call the reconciler makes to the API server.

    `spec.replicas` goes through the scale subresource when the CRD has one. Crossplane v2.2
    XRDs cannot declare it (v2.3 can), so when the API server answers 404 for /scale while the
    object exists, the reconciler falls back to a merge patch of spec.replicas on the object,
    with the same resourceVersion precondition, for the rest of the process's life.
    """

    def __init__(self, api: client.ApiClient, group: str = GROUP, version: str = VERSION) -> None:
        self.api = api
        self.group, self.version = group, version
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.instance = socket.gethostname()
        self.scale_subresource = True  # until the API server says otherwise

    def _args(self, namespace: str, name: str) -> tuple[str, str, str, str, str]:
        return (self.group, self.version, namespace, PLURAL, name)

    def list_model_deployments(self) -> tuple[list[dict[str, Any]], str]:
        body = api_map(self.custom.list_cluster_custom_object(self.group, self.version, PLURAL))
        return body.get("items", []), body.get("metadata", {}).get("resourceVersion", "")

    def watch_model_deployments(
        self, resource_version: str, timeout_seconds: int, stream: watch.Watch
    ) -> Iterable[dict[str, Any]]:
        return stream.stream(
            self.custom.list_cluster_custom_object,
            self.group,
            self.version,
            PLURAL,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            allow_watch_bookmarks=True,
        )

    def read_scale(self, namespace: str, name: str) -> Scale:
        if self.scale_subresource:
            try:
                body = api_map(
                    self.custom.get_namespaced_custom_object_scale(*self._args(namespace, name))
                )
            except ApiException as err:
                if err.status != 404:
                    raise
                body = api_map(
                    self.custom.get_namespaced_custom_object(*self._args(namespace, name))
                )
                self.scale_subresource = False  # the object is there, its /scale is not
                log.info("no scale subresource on %s: writing spec.replicas directly", PLURAL)
        else:
            body = api_map(self.custom.get_namespaced_custom_object(*self._args(namespace, name)))
        return Scale(
            int((body.get("spec") or {}).get("replicas") or 0),
            body.get("metadata", {}).get("resourceVersion", ""),
        )

    def patch_scale(self, namespace: str, name: str, replicas: int, resource_version: str) -> int:
        """Set spec.replicas; 409 if the object moved on since `resource_version`."""
        body: dict[str, Any] = {"spec": {"replicas": replicas}}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        patch = (
            self.custom.patch_namespaced_custom_object_scale
            if self.scale_subresource
            else self.custom.patch_namespaced_custom_object
        )
        out = api_map(patch(*self._args(namespace, name), body, field_manager=FIELD_MANAGER))
        return int((out.get("spec") or {}).get("replicas") or 0)

    def annotate(self, namespace: str, name: str, decision: Decision) -> None:
        value = json.dumps(decision.annotation(), sort_keys=True, separators=(",", ":"))
        self.custom.patch_namespaced_custom_object(
            *self._args(namespace, name),
            {"metadata": {"annotations": {ANNOTATION: value}}},
            field_manager=FIELD_MANAGER,
        )

    def event(self, md: dict[str, Any], decision: Decision) -> client.CoreV1Event:
        meta = md["metadata"]
        now = _now()
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                generate_name=f"{meta['name']}.", namespace=meta["namespace"]
            ),
            involved_object=client.V1ObjectReference(
                api_version=f"{self.group}/{self.version}",
                kind=KIND,
                name=meta["name"],
                namespace=meta["namespace"],
                uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
            ),
            reason=str(decision.reason),
            message=decision.message,
            type="Warning" if decision.warning else "Normal",
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=self.instance,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        return self.core.create_namespaced_event(meta["namespace"], body)


def api_error(err: Exception) -> str:
    """A one-line description of an API failure that never includes request credentials."""
    if isinstance(err, ApiException):
        detail = ""
        try:
            detail = json.loads(err.body or "{}").get("message", "")
        except (ValueError, AttributeError):
            detail = ""
        return f"HTTP {err.status} {err.reason or ''}: {detail}".strip()
    return f"{type(err).__name__}: {err}"


class ModelDeploymentCache:
    """ModelDeployments by (namespace, name), kept current by list then watch."""

    def __init__(self, kube: Kube, watch_timeout_seconds: int = 300) -> None:
        self.kube = kube
        self.watch_timeout_seconds = watch_timeout_seconds
        self.synced = threading.Event()
        self._items: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stream: watch.Watch | None = None

    @staticmethod
    def _key(md: dict[str, Any]) -> tuple[str, str]:
        return (md["metadata"]["namespace"], md["metadata"]["name"])

    def relist(self) -> str:
        items, resource_version = self.kube.list_model_deployments()
        with self._lock:
            self._items = {self._key(md): md for md in items}
        self.synced.set()
        return resource_version

    def apply(self, event: dict[str, Any]) -> str | None:
        """Fold one watch event into the cache; returns the new resourceVersion, or None to
        ask for a relist (the watch expired)."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            return None
        resource_version = obj.get("metadata", {}).get("resourceVersion")
        if kind == "BOOKMARK":
            return resource_version
        with self._lock:
            if kind == "DELETED":
                self._items.pop(self._key(obj), None)
            else:
                self._items[self._key(obj)] = obj
        return resource_version

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items.values())

    def run(self, stop: threading.Event, on_error: Callable[[str], None] | None = None) -> None:
        """List, then watch from that version; relist on expiry or error, until `stop`."""
        resource_version: str | None = None
        while not stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self.relist()
                self._stream = watch.Watch()
                for event in self.kube.watch_model_deployments(
                    resource_version, self.watch_timeout_seconds, self._stream
                ):
                    resource_version = self.apply(event)
                    if resource_version is None or stop.is_set():
                        break
            except Exception as err:  # any failure: back off and relist
                message = api_error(err)
                log.warning("watching ModelDeployments failed: %s", message)
                if on_error:
                    on_error(message)
                resource_version = None
                stop.wait(5.0)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.stop()
