"""A loopback OpenAI-compatible server that streams as vLLM or llama.cpp do, with known latencies.

For the gate's tests and `plnt bench`, and for trying `plnt gate` by hand:

    python -m plnt.gate.fake_server --port 8000 --ttft-ms 120 --tpot-ms 20 --tokens 32

A chat completion streams, over HTTP/1.1 chunked transfer, `data: {json}` events: the role chunk
and the first token at TTFT (vLLM sends the role chunk with the first engine output), one content
delta per token every TPOT (scheduled on absolute times so sleeps do not drift), a finish chunk
(or `finish_reason: "length"` on the last token when max_tokens cuts the answer), the usage chunk
with `choices: []`, then `data: [DONE]`. Failure modes (FAILURES) break that on purpose.

Dialects (DIALECTS) are what real engines do differently, as the gate met them against
llama.cpp: `llama-server` sends the role chunk with `content: null` together with the first
token, ends with an empty-delta finish chunk and pings idle streams with SSE comments;
`llama-cpp-python` sends the role chunk without `content` and no usage chunk at all, whatever
`stream_options` asks. `keepalive_ms` sends `: keep-alive` comments while a stream waits.

Plain asyncio streams rather than a web framework: the failure modes need control of the bytes on
the wire (a broken chunked body, an aborted socket) and no new dependency is needed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

FAILURES: dict[str, str] = {
    "http-500": "answer HTTP 500 with a JSON error body, no stream",
    "malformed": "send a chunk that is not valid JSON in the middle of the stream",
    "missing-fields": "send a chunk whose choice has no delta",
    "no-done": "end the body cleanly but never send data: [DONE]",
    "empty": "stream the role and finish chunks with no text, usage 0 tokens, [DONE]",
    "hang": "send the response headers, then nothing until the client gives up",
    "close": "abort the connection after a few tokens",
    "error-event": "send an error object inside the stream, then [DONE] (vLLM on engine errors)",
    "error-abort": "send an error object after a few tokens, then cut the chunked body short "
    "(llama.cpp when a prompt outgrows the context)",
    "drop": "read the request, then close the connection without a byte of response (an engine "
    "closing a reused keep-alive connection)",
    "inflate-usage": "stream normally but claim 100 times the tokens in the usage chunk",
}


@dataclass(frozen=True)
class Dialect:
    """How one engine shapes the chunks around the tokens."""

    role_delta: dict[str, Any]
    role_with_first_token: bool  # the role chunk goes out with the first token, not before it
    finish_delta: dict[str, Any]
    finish_apart: bool  # finish_reason always in a chunk of its own, never on the last token
    usage: bool  # honours stream_options.include_usage
    timings: bool  # llama-server's server-side timings on the last chunk


DIALECTS: dict[str, Dialect] = {
    "vllm": Dialect(
        {"role": "assistant", "content": ""}, False, {"content": ""}, False, True, False
    ),
    "llama-server": Dialect({"role": "assistant", "content": None}, True, {}, True, True, True),
    "llama-cpp-python": Dialect({"role": "assistant"}, False, {}, True, False, False),
}

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 500: "Error"}
_WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit")


@dataclass(frozen=True)
class Behaviour:
    """How the server answers chat completions. fail_requests picks which requests (0-based, in
    arrival order) get the failure; None means every request."""

    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    tokens: int = 16
    failure: str | None = None
    fail_requests: frozenset[int] | None = None
    model: str | None = None
    api_key: str | None = None
    dialect: str = "vllm"
    keepalive_ms: float = 0.0  # 0: no keep-alive comments
    first_token_bytes: int = 0  # pad the first token's text to this many bytes (a huge chunk)

    def __post_init__(self) -> None:
        if self.failure is not None and self.failure not in FAILURES:
            raise ValueError(f"unknown failure {self.failure!r}; one of {sorted(FAILURES)}")
        if self.dialect not in DIALECTS:
            raise ValueError(f"unknown dialect {self.dialect!r}; one of {sorted(DIALECTS)}")
        if self.keepalive_ms < 0 or self.first_token_bytes < 0:
            raise ValueError("keepalive_ms and first_token_bytes must not be negative")
        if self.tokens < 0 or self.ttft_ms < 0 or self.tpot_ms < 0:
            raise ValueError("tokens, ttft_ms and tpot_ms must not be negative")


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


def _event(payload: dict[str, Any] | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class FakeServer:
    """The server; `async with FakeServer(Behaviour(...)) as server:` then use server.url."""

    def __init__(self, behaviour: Behaviour, host: str = "127.0.0.1", port: int = 0) -> None:
        self.behaviour = behaviour
        self.host = host
        self.port = port
        self.requests: list[dict[str, Any]] = []  # chat completion bodies, in arrival order
        self.authorizations: list[str | None] = []  # the Authorization header of each
        self.busy_ns = 0  # time with at least one chat completion in flight
        # Per chat completion: when it was read and when each token was written
        # (time.perf_counter_ns, the clock the gate measures with).
        self.received_ns: list[int] = []
        self.token_ns: list[list[int]] = []
        self._active = 0
        self._busy_since = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> FakeServer:
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> FakeServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while (request := await _read_request(reader)) is not None:
                if not await self._respond(request, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except ValueError:  # not HTTP/1.1 as the gate speaks it
            with contextlib.suppress(ConnectionError):
                await _send_error(writer, 400, "BadRequestError", "malformed HTTP request")
        except asyncio.CancelledError:
            pass  # stop() ends open connections; the task ends quietly
        finally:
            self._connections.discard(task)
            writer.close()

    async def _respond(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False means the connection must close afterwards."""
        route = (request.method, request.path)
        if route == ("GET", "/health"):
            return await _send_json(writer, 200, {})
        if route == ("GET", "/v1/models"):
            name = self.behaviour.model or "fake-model"
            return await _send_json(writer, 200, {"object": "list", "data": [{"id": name}]})
        if route == ("GET", "/stats"):
            stats = {"requests": len(self.requests), "busy_ns": self.busy_ns}
            return await _send_json(writer, 200, stats)
        if route != ("POST", "/v1/chat/completions"):
            return await _send_error(writer, 404, "NotFoundError", f"no route {request.path}")
        self._active += 1
        if self._active == 1:
            self._busy_since = time.perf_counter_ns()
        try:
            return await self._chat(request, writer)
        finally:
            self._active -= 1
            if self._active == 0:
                self.busy_ns += time.perf_counter_ns() - self._busy_since

    async def _chat(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        received = asyncio.get_running_loop().time()
        received_ns = time.perf_counter_ns()
        behaviour = self.behaviour
        try:
            body = json.loads(request.body)
        except ValueError:
            return await _send_error(writer, 400, "BadRequestError", "body is not JSON")
        ordinal = len(self.requests)
        self.requests.append(body)
        self.received_ns.append(received_ns)
        self.token_ns.append([])
        self.authorizations.append(request.headers.get("authorization"))
        refused = self._refusal(request, body)
        if refused is not None:
            return await _send_error(writer, *refused)
        selected = behaviour.fail_requests is None or ordinal in behaviour.fail_requests
        failure = behaviour.failure if selected else None
        if failure == "http-500":
            return await _send_error(writer, 500, "InternalServerError", "engine failed")
        if failure == "drop":
            writer.transport.abort()
            return False
        return await self._answer(writer, body, ordinal, received, failure)

    def _refusal(self, request: _Request, body: dict[str, Any]) -> tuple[int, str, str] | None:
        """The error (status, type, message) an engine answers this request with, or None."""
        behaviour = self.behaviour
        if behaviour.api_key and request.headers.get("authorization") != (
            f"Bearer {behaviour.api_key}"
        ):
            return 401, "AuthenticationError", "Unauthorized"
        model = body.get("model")
        if behaviour.model and model != behaviour.model:
            return 404, "NotFoundError", f"The model `{model}` does not exist."
        if body.get("stream") is not True:
            return 400, "BadRequestError", "only stream=true is served"
        return None

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        body: dict[str, Any],
        ordinal: int,
        received: float,
        failure: str | None,
    ) -> bool:
        """The streamed answer: the first token after TTFT, one every TPOT, then the end (or
        the failure `behaviour` asks for)."""
        behaviour = self.behaviour
        dialect = DIALECTS[behaviour.dialect]
        max_tokens = body.get("max_tokens")
        tokens = behaviour.tokens
        if isinstance(max_tokens, int) and max_tokens < tokens:
            tokens = max_tokens
        stream = _Stream(
            writer, str(body.get("model")), f"chatcmpl-fake-{ordinal}", self.token_ns[ordinal],
            dialect,
        )  # fmt: skip
        await stream.headers()
        if failure == "hang":
            await asyncio.Event().wait()  # until the client disconnects and stop() cancels us
        cut = tokens < behaviour.tokens  # max_tokens ends the answer: "length" on the last token
        if failure == "empty":
            tokens, cut = 0, False
        # Every token's bytes are built before the first is due: a huge chunk leaves on time.
        chunks = self._chunks(stream, tokens, cut=cut)
        await stream.wait_until(received + behaviour.ttft_ms / 1000, behaviour.keepalive_ms)
        if not dialect.role_with_first_token:
            await stream.role()
        if failure == "error-event":
            await stream.send({"error": {"message": "engine died", "type": "InternalError"}})
            await stream.done()
            return True
        for k, chunk in enumerate(chunks):
            due = received + (behaviour.ttft_ms + k * behaviour.tpot_ms) / 1000
            await stream.wait_until(due, behaviour.keepalive_ms)
            await stream.write_token(chunk)
            if k == min(2, tokens - 1) and failure in FAILS_MID_STREAM:
                return await stream.fail(failure)
        return await self._end(stream, body, tokens, cut=cut, failure=failure)

    def _chunks(self, stream: _Stream, tokens: int, *, cut: bool) -> list[bytes]:
        """Every token's HTTP chunk: words, the first padded to `first_token_bytes`."""
        behaviour, dialect = self.behaviour, stream.dialect
        chunks = []
        for k in range(tokens):
            finish = "length" if cut and k == tokens - 1 and not dialect.finish_apart else None
            text = _WORDS[k % len(_WORDS)] + " "
            if k == 0 and behaviour.first_token_bytes > len(text):
                text = text.ljust(behaviour.first_token_bytes, "x")
            with_role = k == 0 and dialect.role_with_first_token
            chunks.append(stream.token(text, finish, with_role=with_role))
        return chunks

    async def _end(
        self, stream: _Stream, body: dict[str, Any], tokens: int, *, cut: bool, failure: str | None
    ) -> bool:
        """The finish reason, the usage (when asked and the dialect has it) and [DONE]."""
        dialect = stream.dialect
        include_usage = dialect.usage and bool(
            (body.get("stream_options") or {}).get("include_usage")
        )
        if not cut or dialect.finish_apart:
            await stream.finish("length" if cut else "stop")
        if include_usage:
            claimed = tokens * 100 if failure == "inflate-usage" else tokens
            await stream.usage(
                prompt_tokens=len(json.dumps(body.get("messages"))) // 4, completion_tokens=claimed
            )
        if failure == "no-done":
            await stream.end()
            return True
        await stream.done()
        return True


FAILS_MID_STREAM = ("malformed", "missing-fields", "close", "error-abort")


class _Stream:
    """Writes one vLLM-shaped SSE response, one HTTP chunk per event."""

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        model: str,
        request_id: str,
        token_ns: list[int],
        dialect: Dialect,
    ) -> None:
        self.writer = writer
        self.token_ns = token_ns
        self.dialect = dialect
        self.base = {
            "id": request_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }

    async def _write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def headers(self) -> None:
        head = (
            "HTTP/1.1 200 OK\r\n"
            "content-type: text/event-stream; charset=utf-8\r\n"
            "transfer-encoding: chunked\r\n\r\n"
        )
        await self._write(head.encode())

    async def send(self, *payloads: dict[str, Any] | str) -> None:
        """One HTTP chunk holding the events (llama-server writes a step's events at once)."""
        await self._write(_chunked(b"".join(_event(p) for p in payloads)))

    def token(self, text: str, finish: str | None, with_role: bool = False) -> bytes:
        """The HTTP chunk carrying one token (with the role chunk before it, if asked)."""
        chunk = self._choice({"content": text}, finish)
        events = (
            [self._choice(dict(self.dialect.role_delta), None), chunk] if with_role else [chunk]
        )
        return _chunked(b"".join(_event(e) for e in events))

    async def write_token(self, data: bytes) -> None:
        await self._write(data)
        self.token_ns.append(time.perf_counter_ns())

    async def wait_until(self, deadline: float, keepalive_ms: float) -> None:
        """Sleep until deadline, sending a keep-alive comment every keepalive_ms meanwhile."""
        loop = asyncio.get_running_loop()
        while keepalive_ms and deadline - loop.time() > keepalive_ms / 1000:
            await asyncio.sleep(keepalive_ms / 1000)
            await self._write(_chunked(b": keep-alive\n\n"))
        await _sleep_until(deadline)

    def _choice(self, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if finish is not None:
            choice["stop_reason"] = None
        return {**self.base, "choices": [choice]}

    async def role(self) -> None:
        await self.send(self._choice(dict(self.dialect.role_delta), None))

    async def finish(self, reason: str) -> None:
        await self.send(self._choice(dict(self.dialect.finish_delta), reason))

    async def usage(self, prompt_tokens: int, completion_tokens: int) -> None:
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        }
        chunk: dict[str, Any] = {**self.base, "choices": [], "usage": usage}
        if self.dialect.timings:
            chunk["timings"] = {"predicted_n": completion_tokens, "prompt_n": prompt_tokens}
        await self.send(chunk)

    async def done(self) -> None:
        await self.send("[DONE]")
        await self.end()

    async def end(self) -> None:
        await self._write(b"0\r\n\r\n")

    async def fail(self, failure: str) -> bool:
        """Break the stream as the failure mode says; False: the connection must close."""
        if failure == "close":
            self.writer.transport.abort()
            return False
        if failure == "error-abort":
            error = {"code": 400, "message": "the request exceeds the available context size"}
            await self.send({"error": {**error, "type": "exceed_context_size_error"}})
            self.writer.transport.abort()  # no terminating chunk, no [DONE]
            return False
        if failure == "malformed":
            await self.send('{"id": "broken", "choices": [{"index": 0, "delta": {"content": "x"')
        else:
            await self.send({**self.base, "choices": [{"index": 0, "finish_reason": None}]})
        await self.done()
        return True


async def _sleep_until(deadline: float) -> None:
    delay = deadline - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """One HTTP/1.1 request with a Content-Length body; None when the client closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return _Request(method=method, path=target.split("?", 1)[0], headers=headers, body=body)


async def _send_json(writer: asyncio.StreamWriter, status: int, payload: dict[str, Any]) -> bool:
    body = json.dumps(payload).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    return True


async def _send_error(writer: asyncio.StreamWriter, status: int, kind: str, message: str) -> bool:
    """An error shaped like vLLM's ErrorResponse."""
    error = {"message": message, "type": kind, "param": None, "code": status}
    return await _send_json(writer, status, {"error": error})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m plnt.gate.fake_server", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--ttft-ms", type=float, default=120.0)
    parser.add_argument("--tpot-ms", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--failure", choices=sorted(FAILURES), help="break every request so")
    parser.add_argument("--dialect", choices=sorted(DIALECTS), default="vllm")
    parser.add_argument("--keepalive-ms", type=float, default=0.0)
    parser.add_argument("--model", help="serve only this model name (others get 404)")
    parser.add_argument("--api-key-env", help="require the bearer key held in this variable")
    return parser


async def _serve(behaviour: Behaviour, host: str, port: int) -> None:
    async with FakeServer(behaviour, host=host, port=port) as server:
        sys.stdout.write(f"fake vLLM server on {server.url}\n")
        sys.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    try:
        behaviour = Behaviour(
            ttft_ms=args.ttft_ms,
            tpot_ms=args.tpot_ms,
            tokens=args.tokens,
            failure=args.failure,
            dialect=args.dialect,
            keepalive_ms=args.keepalive_ms,
            model=args.model,
            api_key=api_key,
        )
    except ValueError as err:
        sys.stderr.write(f"fake_server: {err}\n")
        return 2
    asyncio.run(_serve(behaviour, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
