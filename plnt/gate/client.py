"""The gate's measuring client: streaming chat completions over httpx, timed on the client.

Per prompt, with a monotonic clock (`time.perf_counter_ns`):
- TTFT = request sent (its first byte on the wire, so connection setup and any TLS handshake
  are not counted) -> first chunk with generated text;
- TPOT = (last token time - first token time) / (completion tokens - 1), the token count from the
  usage chunk, else the number of text deltas; None for a one-token answer.

Fail closed: every error becomes a failed prompt with an outcome (see `stream.OUTCOMES`) and a
reason, never an exception and never a pass. Only connect errors are retried (the request never
reached the server, so a retry measures nothing twice); a stream that breaks is a failure.
The API key goes into the Authorization header and nowhere else.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import httpx

from plnt.gate import prompts
from plnt.gate.stream import EventDecoder, PromptError, StreamTally

# The seed's smokeTest defaults (WorkflowRun spec.canary.smokeTest).
DEFAULT_PROMPTS = 10
DEFAULT_TTFT_BUDGET_MS = 250.0
DEFAULT_TPOT_BUDGET_MS = 40.0
# Enough tokens for a stable TPOT, few enough to keep a smoke test short.
DEFAULT_MAX_TOKENS = 64
DEFAULT_CONCURRENCY = 4
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_CONNECT_RETRIES = 2
DEFAULT_RETRY_BACKOFF_S = 0.2

_ERROR_BODY_CHARS = 200


@dataclass(frozen=True)
class GateConfig:
    """What to measure and against which budgets. Raises ValueError on out-of-range values."""

    base_url: str
    model: str
    prompts: int = DEFAULT_PROMPTS
    ttft_budget_ms: float = DEFAULT_TTFT_BUDGET_MS
    tpot_budget_ms: float = DEFAULT_TPOT_BUDGET_MS
    max_tokens: int = DEFAULT_MAX_TOKENS
    concurrency: int = DEFAULT_CONCURRENCY
    timeout_s: float = DEFAULT_TIMEOUT_S
    connect_retries: int = DEFAULT_CONNECT_RETRIES
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        url = urlsplit(self.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base URL {self.base_url!r} is not an http(s) URL with a host")
        if not self.model:
            raise ValueError("model must not be empty")
        for name, minimum in (("prompts", 1), ("max_tokens", 1), ("concurrency", 1)):
            if getattr(self, name) < minimum:
                raise ValueError(f"{name} must be at least {minimum}")
        for name in ("ttft_budget_ms", "tpot_budget_ms", "timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be greater than 0")
        if self.connect_retries < 0 or self.retry_backoff_s < 0:
            raise ValueError("connect_retries and retry_backoff_s must not be negative")


@dataclass(frozen=True)
class PromptResult:
    """One prompt's measurement: outcome "ok" with figures, or a failure with its reason."""

    index: int
    outcome: str
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    tokens: int = 0
    error: str | None = None
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def chat_completions_url(base_url: str) -> str:
    """`{base_url}/v1/chat/completions`; a base URL that already ends in /v1 is not doubled."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        return f"{base}/chat/completions"
    return f"{base}/v1/chat/completions"


def request_body(config: GateConfig, index: int) -> dict[str, Any]:
    """The chat completion request for the index-th prompt."""
    return {
        "model": config.model,
        "messages": prompts.messages(index),
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": config.max_tokens,
    }


def _headers(config: GateConfig) -> dict[str, str]:
    headers = {"Accept": "text/event-stream"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    return headers


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


async def _stream_once(client: httpx.AsyncClient, config: GateConfig, index: int) -> PromptResult:
    """One attempt: send, read the whole stream, time it. Raises on any failure."""
    sent_ns = time.perf_counter_ns()

    async def trace(event: str, _info: dict[str, Any]) -> None:
        # "Request sent" is when its first byte goes out: the connection is ready by then,
        # so neither the pool, DNS nor the TCP handshake counts towards TTFT.
        nonlocal sent_ns
        if event.endswith("send_request_headers.started"):
            sent_ns = time.perf_counter_ns()

    request = client.build_request(
        "POST",
        chat_completions_url(config.base_url),
        json=request_body(config, index),
        headers=_headers(config),
        extensions={"trace": trace},
    )
    response = await client.send(request, stream=True)
    try:
        if not 200 <= response.status_code < 300:
            body = " ".join((await response.aread()).decode("utf-8", "replace").split())
            raise PromptError(
                "http-error", f"HTTP {response.status_code}: {body[:_ERROR_BODY_CHARS]}"
            )
        tally = StreamTally()
        decoder = EventDecoder()
        async for line in response.aiter_lines():
            now_ns = time.perf_counter_ns()
            payload = decoder.feed(line)
            if payload is not None:
                tally.add_event(payload, now_ns)
        payload = decoder.flush()
        if payload is not None:
            tally.add_event(payload, time.perf_counter_ns())
        tokens = tally.finish()
    finally:
        await response.aclose()
    assert tally.first_token_ns is not None and tally.last_token_ns is not None
    spread_ns = tally.last_token_ns - tally.first_token_ns
    return PromptResult(
        index=index,
        outcome="ok",
        ttft_ms=(tally.first_token_ns - sent_ns) / 1e6,
        tpot_ms=spread_ns / (tokens - 1) / 1e6 if tokens > 1 else None,
        tokens=tokens,
    )


async def measure_prompt(client: httpx.AsyncClient, config: GateConfig, index: int) -> PromptResult:
    """Measure one prompt, retrying only connect errors; never raises (fails closed)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            async with asyncio.timeout(config.timeout_s):
                result = await _stream_once(client, config, index)
            return replace(result, attempts=attempt)
        except (httpx.ConnectError, httpx.ConnectTimeout) as err:
            if attempt > config.connect_retries:
                outcome, reason = "connect-error", f"cannot connect ({attempt} attempts): {err}"
                break
            await asyncio.sleep(config.retry_backoff_s * 2 ** (attempt - 1))
        except (TimeoutError, httpx.TimeoutException):
            outcome, reason = "timeout", f"no complete answer within {config.timeout_s:g} s"
            break
        except PromptError as failure:
            outcome, reason = failure.outcome, failure.message
            break
        except httpx.HTTPError as err:
            outcome, reason = "stream-error", f"{type(err).__name__}: {err}"
            break
        except Exception as err:  # a bug in the gate must fail the prompt, never pass it
            outcome, reason = "client-error", f"{type(err).__name__}: {err}"
            break
    return PromptResult(
        index=index, outcome=outcome, error=_redact(reason, config.api_key), attempts=attempt
    )


async def measure(config: GateConfig) -> list[PromptResult]:
    """Send config.prompts streaming requests, at most config.concurrency at a time.

    Concurrency is bounded by that many workers, each with its own one-connection client,
    rather than by a semaphore over one shared pool: httpcore's pool rescans every connection
    whenever a request starts or ends, which at 64 connections costs milliseconds of event-loop
    time per request and would stall the reading, and so the timing, of the other streams.
    """
    pending = iter(range(config.prompts))  # shared by the workers; next() never interleaves
    results: list[PromptResult] = []
    ssl_context = httpx.create_ssl_context()  # built once: loading the CA bundle is not free
    one_connection = httpx.Limits(max_connections=1, max_keepalive_connections=1)

    async def worker() -> None:
        # trust_env=False: a proxy from the environment would add its own latency.
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s),
            limits=one_connection,
            verify=ssl_context,
            trust_env=False,
        ) as client:
            for index in pending:
                results.append(await measure_prompt(client, config, index))

    await asyncio.gather(*(worker() for _ in range(min(config.concurrency, config.prompts))))
    return sorted(results, key=lambda r: r.index)
