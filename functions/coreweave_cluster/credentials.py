"""Finding the CoreWeave API token behind spec.credentials.

The token is read from the Secret that the provider-coreweave (Cluster)ProviderConfig names
in spec.credentials.secretRef; both are asked of Crossplane as required resources. What this
module returns never carries the Secret's content except in ``Token.value``, and its problem
messages only name the objects involved, so they are safe for conditions and results.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import xp
from plnt.models.coreweave_cluster import Credentials

COREWEAVE_PROVIDER_API = "coreweave.m.crossplane.io/v1beta1"
REQUIRED_PROVIDER_CONFIG = "coreweave-provider-config"
REQUIRED_SECRET = "coreweave-credentials"  # noqa: S105 (a requirement name)


@dataclasses.dataclass(frozen=True)
class Token:
    """Either the token (``value``) or why there is none (``problem``, safe to show)."""

    value: str | None = None
    problem: str = ""
    pending: bool = False  # Crossplane has not answered a requirement yet


def find_token(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    credentials: Credentials,
    namespace: str,
) -> Token:
    kind, name = credentials.type, credentials.name
    where = f"{kind} {name}" if kind == "ClusterProviderConfig" else f"{kind} {namespace}/{name}"
    configs = xp.require(
        req,
        rsp,
        REQUIRED_PROVIDER_CONFIG,
        COREWEAVE_PROVIDER_API,
        kind,
        match_name=name,
        namespace=namespace if kind == "ProviderConfig" else None,
    )
    if configs is None:
        return Token(problem=where, pending=True)
    if not configs:
        return Token(problem=f"{where} not found")
    creds = _map(_map(configs[0].get("spec")).get("credentials"))
    ref = _map(creds.get("secretRef"))
    if creds.get("source") != "Secret" or not _text(ref.get("name")) or not _text(ref.get("key")):
        return Token(problem=f"{where} does not take its credentials from a Secret")
    secret_ns = _text(ref.get("namespace")) or namespace
    secret_where = f"Secret {secret_ns}/{ref['name']}"
    secrets = xp.require(
        req,
        rsp,
        REQUIRED_SECRET,
        "v1",
        "Secret",
        match_name=ref["name"],
        namespace=secret_ns,
    )
    if secrets is None:
        return Token(problem=secret_where, pending=True)
    if not secrets:
        return Token(problem=f"{secret_where} (named by {where}) not found")
    raw = _secret_value(secrets[0], ref["key"])
    if raw is None:
        return Token(problem=f"{secret_where} has no key {ref['key']!r}")
    token = token_from_credentials(raw)
    if not token:
        return Token(problem=f"key {ref['key']!r} of {secret_where} holds no CoreWeave API token")
    return Token(value=token)


def _secret_value(secret: dict[str, Any], key: str) -> str | None:
    string_data = _map(secret.get("stringData"))
    if key in string_data:
        return str(string_data[key])
    data = _map(secret.get("data"))
    if key not in data:
        return None
    try:
        return base64.b64decode(str(data[key]), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def token_from_credentials(raw: str) -> str | None:
    """provider-coreweave's credentials: a JSON object with "token", or the bare token."""
    text = raw.strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            return None
        token = doc.get("token") if isinstance(doc, dict) else None
        return token.strip() if isinstance(token, str) and token.strip() else None
    if any(c.isspace() for c in text):
        return None
    return text


def _map(value: object) -> dict[str, Any]:
    """A ProviderConfig is anyone's to write: a field of the wrong shape reads as absent."""
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
