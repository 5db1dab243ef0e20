"""Routes on a live Crossplane (docs/tenancy.md, "Routes"): a second namespace's ModelService
that claims the first one's path is refused, while the first keeps receiving its own traffic
through the control-plane Gateway's stand-in data plane (tests/e2e/engines.py).

Namespace routes-owner serves `/routes-owner/chat` (its default path) from a hand-made
ModelEndpoint, a fake OpenAI-compatible provider on a TEST-NET-1 address. Namespace
routes-intruder asks for `/routes-owner/chat/v1`, where the longest prefix would win every
chat completion sent to the owner, with an endpoint of its own (another fake provider):

- with no InferenceGrant: `Routed` False, PathNotPermitted, and no HTTPRoute in its namespace;
- granted `/routes-owner` by the platform (a mistake): `Routed` False, RouteConflict, naming
  the owner's HTTPRoute, still no HTTPRoute.

In both, chat completions sent through the control-plane Gateway to the owner's path reach the
owner's provider, every one of them, and none the intruder's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from plnt.gate.fake_server import FakeServer
from tests.e2e import engines, fleet, live, netns

API = "modelplane.ai/v1alpha1"
HTTPROUTE = ("gateway.networking.k8s.io/v1", "HTTPRoute")
OWNER, INTRUDER = "routes-owner", "routes-intruder"
# TEST-NET-1 addresses on the namespace's `lo` that no Gateway takes (they are handed out from .1)
PROVIDER_ADDRESSES = {OWNER: f"{netns.GATEWAY_NET}.30", INTRUDER: f"{netns.GATEWAY_NET}.29"}
OWNER_PATH = f"/{OWNER}/chat"
CLAIMED_PATH = f"{OWNER_PATH}/v1"
REQUESTS = 5


def tenant(ns: str, **service_spec: Any) -> list[dict[str, Any]]:
    """A namespace with a hand-made endpoint (its provider) and a ModelService `chat` over it."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {
            "apiVersion": API,
            "kind": "ModelEndpoint",
            "metadata": {"name": "provider", "namespace": ns, "labels": {"app": "provider"}},
            "spec": {"url": f"http://{PROVIDER_ADDRESSES[ns]}/"},
        },
        {
            "apiVersion": API,
            "kind": "ModelService",
            "metadata": {"name": "chat", "namespace": ns},
            "spec": {
                "endpoints": [{"selector": {"matchLabels": {"app": "provider"}}}],
                **service_spec,
            },
        },
    ]


def mistaken_grant() -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceGrant",
        "metadata": {"name": INTRUDER},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": INTRUDER}},
            "routes": {"paths": [f"/{OWNER}"]},
        },
    }


@pytest.fixture
def providers(plane) -> Iterator[dict[str, FakeServer]]:
    """A fake provider per namespace, served on the data plane's loop (inside the namespace)."""
    loop = plane.simulator.engines.loop
    servers = {
        ns: asyncio.run_coroutine_threadsafe(
            FakeServer(engines.FAST, address, 80).start(), loop
        ).result(10)
        for ns, address in PROVIDER_ADDRESSES.items()
    }
    yield servers
    for server in servers.values():
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)


def routed(plane, ns: str) -> dict[str, Any]:
    service = plane.mgmt.get(API, "ModelService", "chat", ns)
    return live.condition(service, "Routed")


def wait_refused(plane, reason: str) -> dict[str, Any]:
    return live.wait_for(
        lambda: (c := routed(plane, INTRUDER)).get("reason") == reason and c,
        120,
        f"the intruder's ModelService to say Routed False {reason}",
    )


def chat(gateway: str) -> int:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hello"}]}
    url = f"http://{gateway}{CLAIMED_PATH}/chat/completions"
    try:
        with httpx.Client(timeout=20) as client:
            return client.post(url, content=json.dumps(body)).status_code
    except httpx.TransportError:  # nothing listens yet, or the data plane dropped it
        return 0


def assert_owner_keeps_its_traffic(plane, gateway: str, providers: dict[str, FakeServer]) -> None:
    assert plane.mgmt.list(*HTTPROUTE, namespace=INTRUDER) == []
    before = {ns: len(p.requests) for ns, p in providers.items()}
    answers = [chat(gateway) for _ in range(REQUESTS)]
    assert answers == [200] * REQUESTS
    assert len(providers[OWNER].requests) - before[OWNER] == REQUESTS
    assert len(providers[INTRUDER].requests) == before[INTRUDER] == 0


def test_a_second_namespace_claiming_the_first_ones_path_is_refused(plane, providers) -> None:
    fleet.ensure(plane)
    gateway_obj = live.wait_object(
        plane.mgmt, "gateway.networking.k8s.io/v1", "Gateway", "plnt-gateway", "plnt-system",
        until=lambda g: bool((g.get("status") or {}).get("addresses")),
    )  # fmt: skip
    gateway = gateway_obj["status"]["addresses"][0]["value"]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(tenant(OWNER)))
    try:
        live.wait_for(
            lambda: routed(plane, OWNER).get("status") == "True",
            120,
            "the owner's ModelService to be Routed",
        )
        # the data plane reads routes and backends every half second: the owner is served
        live.wait_for(lambda: chat(gateway) == 200, 60, "the owner's path to answer")
        plane.kubectl(
            "apply", "-f", "-", stdin=yaml.safe_dump_all(tenant(INTRUDER, path=CLAIMED_PATH))
        )
        refused = wait_refused(plane, "PathNotPermitted")
        assert refused["status"] == "False"
        assert f"spec.path {CLAIMED_PATH} is outside /{INTRUDER}/" in refused["message"]
        assert_owner_keeps_its_traffic(plane, gateway, providers)

        plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(mistaken_grant()))
        conflict = wait_refused(plane, "RouteConflict")
        assert f"overlaps HTTPRoute {OWNER}/chat of namespace {OWNER}" in conflict["message"]
        assert_owner_keeps_its_traffic(plane, gateway, providers)
    finally:
        plane.kubectl(
            "delete", "--ignore-not-found", "--wait=false",
            "namespace/" + OWNER, "namespace/" + INTRUDER, "inferencegrant/" + INTRUDER,
        )  # fmt: skip
