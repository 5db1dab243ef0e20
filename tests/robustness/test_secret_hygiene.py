"""Credentials never leak: not into any XR status, condition, result or log line.

Every Secret a scenario supplies is rewritten to hold real-looking CoreWeave tokens and
kubeconfigs that we can search for. They may reach the composed Secrets whose job is to carry
them (the kubeconfig a CoreWeaveCluster outputs), and nothing else.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import pathlib

import pytest
import yaml

from plnt_host import render

REPO = pathlib.Path(__file__).resolve().parents[2]
SCENARIOS = render.scenario_folders(REPO / "examples")
TOKEN = "CW-SECRET-7f3a9c2e1b8d4f6a0e5c9b3d7a1f4e8c"
KUBECONFIG_TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6InBsbnQtY2FuYXJ5In0.c2VjcmV0LWNhbmFyeQ.sig"
CANARIES = (TOKEN, KUBECONFIG_TOKEN)


def kubeconfig() -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": "https://203.0.113.7:6443"}}],
            "users": [{"name": "u", "user": {"token": KUBECONFIG_TOKEN}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
    )


def poisoned_value(value: str) -> str:
    """Keeps the value's shape (JSON credentials, a kubeconfig, a bare token), swaps the secret."""
    try:
        doc = yaml.safe_load(value)
    except yaml.YAMLError:
        doc = None
    if isinstance(doc, dict) and "token" in doc:
        return json.dumps({**doc, "token": TOKEN})
    if isinstance(doc, dict) and doc.get("kind") == "Config":
        return kubeconfig()
    return TOKEN


def poisoned(obj: dict) -> dict:
    if obj.get("kind") != "Secret" or obj.get("apiVersion") != "v1":
        return obj
    out = copy.deepcopy(obj)
    plain = {k: base64.b64decode(v).decode() for k, v in (out.get("data") or {}).items()}
    plain |= out.pop("stringData", None) or {}
    out["data"] = {
        k: base64.b64encode(poisoned_value(v).encode()).decode() for k, v in plain.items()
    } or {"token": base64.b64encode(TOKEN.encode()).decode()}
    return out


def leaks(value: object) -> list[str]:
    text = yaml.safe_dump(value)
    encoded = [base64.b64encode(c.encode()).decode()[:24] for c in CANARIES]
    return [c for c in (*CANARIES, *encoded) if c in text]


@pytest.mark.parametrize("folder", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_no_credential_reaches_status_results_or_logs(
    folder: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    scenario = render.load_scenario(folder)
    scenario.required = [poisoned(o) for o in scenario.required]
    scenario.observed = [poisoned(o) for o in scenario.observed]
    with caplog.at_level(logging.DEBUG):
        out = render.render(scenario, tree=True)

    node = [out]
    while node:
        current = node.pop()
        node.extend(current.children)
        assert not leaks(current.xr.get("status")), f"{current.xr['kind']} status"
        assert not leaks(current.results), "function results"
        for obj in current.composed:
            if obj["kind"] == "Secret" and obj["apiVersion"] == "v1":
                continue  # a Secret is where a credential belongs
            assert not leaks(obj), f"{obj['kind']} {obj['metadata'].get('name')}"
    assert not leaks(caplog.text), "log lines"
