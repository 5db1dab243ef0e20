"""The gate's measuring client: streaming chat completions over httpx, timed on the client.

Per prompt, with a monotonic clock (`time.perf_counter_ns`), every time taken when the bytes
arrive, before they are decoded:
- TTFT = request sent (its first byte on the wire, so connection setup and any TLS handshake
  are not counted) -> first byte of the first chunk with generated text;
- TPOT = (last token time - first token time) / (text chunks - 1): what arrived, never the
  server's claimed usage.completion_tokens (which is only checked against the stream; a claim
  the stream contradicts fails the prompt); None for a one-chunk answer;
- the largest gap between two consecutive text chunks (a stall an average TPOT would hide).

Fail closed: every error becomes a failed prompt with an outcome (see `stream.OUTCOMES`) and a
reason, never an exception and never a pass. Retried are only requests that got no byte back:
connect errors (up to connect_retries) and, once, a request the server dropped without a single
byte of response (a reused keep-alive connection the server had just closed). A stream that
broke after its first byte is never retried. The API key goes into the Authorization header and
nowhere else.

Prompts start with a nonce unique to the run (GateConfig.nonce), so a server's prefix cache
cannot answer a smoke test from an earlier one: TTFT is what a new user would see.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import httpx

from plnt.gate import prompts
from plnt.gate.stream import EventParser, PromptError, StreamTally

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
# A request the server dropped before a byte of response is retried this many times.
NO_RESPONSE_RETRIES = 1
# A gateway answers a route it has not programmed yet with 404 (no route) or 503 (no healthy
# upstream) for a moment after its backend became ready: the gate waits up to this long for
# another answer before the first prompt, so what it measures is the engine, not the rollout
# of the route. A route still unrouted then is measured anyway and fails its prompts.
DEFAULT_ROUTE_WAIT_S = 30.0
ROUTE_POLL_S = 0.5
ROUTE_POLL_TIMEOUT_S = 5.0
NOT_ROUTED = frozenset({404, 503})

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
    route_wait_s: float = DEFAULT_ROUTE_WAIT_S
    api_key: str | None = field(default=None, repr=False)
    # Starts every prompt; a fresh random one per config unless the caller names the run.
    nonce: str = field(default_factory=lambda: secrets.token_hex(6))

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
        if self.connect_retries < 0 or self.retry_backoff_s < 0 or self.route_wait_s < 0:
            raise ValueError(
                "connect_retries, retry_backoff_s and route_wait_s must not be negative"
            )


@dataclass(frozen=True)
class PromptResult:
    """One prompt's measurement: outcome "ok" with figures, or a failure with its reason."""

    index: int
    outcome: str
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    tokens: int = 0
    max_gap_ms: float | None = None
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
        "messages": prompts.messages(index, config.nonce),
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


class NoResponse(Exception):  # noqa: N818 (reads better at the raise site)
    """The server closed the connection before a byte of response arrived."""


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
    try:
        response = await client.send(request, stream=True)
    except (httpx.RemoteProtocolError, httpx.ReadError) as err:
        raise NoResponse(f"{type(err).__name__}: {err}") from None
    try:
        if not 200 <= response.status_code < 300:
            body = " ".join((await response.aread()).decode("utf-8", "replace").split())
            raise PromptError(
                "http-error", f"HTTP {response.status_code}: {body[:_ERROR_BODY_CHARS]}"
            )
        tally = StreamTally(max_tokens=config.max_tokens)
        parser = EventParser()
        async for data in response.aiter_bytes():
            now_ns = time.perf_counter_ns()  # before anything is decoded
            for event in parser.feed(data, now_ns):
                tally.add_event(event.payload, event.arrived_ns)
        for event in parser.close():
            tally.add_event(event.payload, event.arrived_ns)
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
        max_gap_ms=tally.max_gap_ns / 1e6 if tokens > 1 else None,
    )


async def measure_prompt(client: httpx.AsyncClient, config: GateConfig, index: int) -> PromptResult:
    """Measure one prompt, retrying only requests that got no byte back; never raises."""
    attempt = connect_failures = dropped = 0
    while True:
        attempt += 1
        try:
            async with asyncio.timeout(config.timeout_s):
                result = await _stream_once(client, config, index)
            return replace(result, attempts=attempt)
        except (httpx.ConnectError, httpx.ConnectTimeout) as err:
            connect_failures += 1
            if connect_failures > config.connect_retries:
                outcome, reason = "connect-error", f"cannot connect ({attempt} attempts): {err}"
                break
            await asyncio.sleep(config.retry_backoff_s * 2 ** (connect_failures - 1))
        except NoResponse as err:
            dropped += 1
            if dropped > NO_RESPONSE_RETRIES:
                outcome, reason = "stream-error", f"no response ({attempt} attempts): {err}"
                break
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


def models_url(base_url: str) -> str:
    """`{base_url}/v1/models`, the OpenAI listing every compatible engine serves."""
    return chat_completions_url(base_url).removesuffix("/chat/completions") + "/models"


async def wait_routable(config: GateConfig) -> float:
    """Seconds until `GET /v1/models` at the base URL is answered with anything but 404 or
    503 (or not answered at all), polled every ROUTE_POLL_S, at most config.route_wait_s.
    The waiting is never part of a prompt's figures."""
    started = time.monotonic()
    deadline = started + config.route_wait_s
    timeout = httpx.Timeout(min(config.timeout_s, ROUTE_POLL_TIMEOUT_S))
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
        while True:
            try:
                response = await client.get(models_url(config.base_url), headers=_headers(config))
                if response.status_code not in NOT_ROUTED:
                    break
            except httpx.HTTPError:
                break  # nothing answers at all: the prompts' own connect retries judge that
            if time.monotonic() + ROUTE_POLL_S > deadline:
                break
            await asyncio.sleep(ROUTE_POLL_S)
    return time.monotonic() - started


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
