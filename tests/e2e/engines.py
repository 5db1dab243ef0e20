"""The gateway data plane and the engines behind it, for the live control plane.

No gateway proxy or GPU engine runs here. Each workload cluster's Gateway gets a TEST-NET-1
address inside the private network namespace, and this module listens on it (port 80) as the
gateway's data plane would: a request is routed by the HTTPRoutes that plnt composed on that
cluster (longest PathPrefix match; no route is a 404), the matched prefix is rewritten away as
the route's URLRewrite says, and the request is forwarded to the replica's engine if one of the
replica's pods is Ready on that cluster (kwok marks them: tests/e2e/workload.py), else answered
503 as a proxy with no healthy upstream would.

The control-plane Gateway's data plane is served the same way, by the HTTPRoutes ModelServices
composed on the management cluster: a matched route's backendRefs lead, through the Services'
EndpointSlices (the IP backends plnt composes; ExternalName is not resolved here), to the
address the endpoint names, with the route's prefix replaced as its URLRewrite says; the backend
is drawn by weight. Routes are matched as Gateway API matches them: by the Host header first (a
route listing the host, without the client's port, beats a wildcard, which beats a route with
no hostnames), then by the longest PathPrefix.

The management cluster's service proxy is stood in for too (`Engines.service_proxy`): a Service's
cluster IP is put on `lo` and its port forwards each connection, byte for byte, to an address of
its EndpointSlices, as kube-proxy's rules would. That is how a ModelService's in-cluster Service
(port 8000, an EndpointSlice holding the Gateway's address) reaches the Gateway.

Which engine answers for a replica is the test's choice (`Engines.policy`): `LLAMA_SERVER`,
llama.cpp's own `llama-server` serving the tiny GGUF the suite generates (tests/engine), so the
canary gate measures real tokens from a real engine; or a `plnt.gate.fake_server` Behaviour,
streaming exactly as vLLM does at a chosen latency, for scenarios that need one revision fast
and another slow (a real engine's latency is not the test's to choose).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from plnt import labels
from plnt.gate.fake_server import Behaviour, FakeServer
from tests.e2e.kube import LATENCY_NICE, APIServer

FAST = Behaviour(ttft_ms=20, tpot_ms=5, tokens=16)
SLOW = Behaviour(ttft_ms=20, tpot_ms=80, tokens=16)
LLAMA_SERVER = "llama-server"
Engine = Behaviour | str  # a fake engine's behaviour, or LLAMA_SERVER
HTTPROUTE = ("gateway.networking.k8s.io/v1", "HTTPRoute")


class Engines:
    """Every gateway's data plane on one asyncio loop in a thread of its own."""

    def __init__(self, simulator: Any) -> None:
        self.simulator = simulator
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, name="plnt-e2e-engines", daemon=True)
        # (namespace, replica) -> the engine that answers; the default is FAST
        self.policy: Callable[[str, str], Engine] = lambda namespace, replica: FAST
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self.answered_by: collections.Counter[Engine] = collections.Counter()  # chat completions
        # per namespace: chat completions sent to its replicas' routes, answered or not (a
        # replica being torn down answers 503), and when the last one came
        self.attempts: collections.Counter[str] = collections.Counter()
        self.last_attempt: dict[str, float] = {}
        self._servers: list[asyncio.AbstractServer] = []
        # every connection's task, held until it ends: asyncio's server protocol holds the
        # connection's StreamReader only weakly, and a task waiting on the next hop could be
        # collected as garbage mid-request, its caller waiting for an answer that never came
        # (2 or 3 requests in 80 through two hops; none with the collector off)
        self._connections: set[asyncio.Task[Any]] = set()
        # per API server: its HTTPRoutes as last listed (the simulator refreshes them twice a
        # second), so no request waits on the API server
        self.routes: dict[str, list[dict[str, Any]]] = {}
        # per API server: (namespace, replica label value) of every replica with a Ready pod
        self.ready: dict[str, set[tuple[str, str]]] = {}
        # per API server: (address, port) per Service (namespace, name) from its EndpointSlices,
        # where the control plane's route backends lead
        self.backends: dict[str, dict[tuple[str, str], tuple[str, int]]] = {}
        self._engines: dict[Behaviour, FakeServer] = {}
        self._lock = threading.Lock()
        self._llama = contextlib.ExitStack()
        self._llama_url: str | None = None
        # (cluster IP, port) -> the endpoint address and port it forwards to (service_proxy)
        self.services: dict[tuple[str, int], tuple[str, int]] = {}

    def start(self) -> None:
        self.thread.start()

    def _serve(self) -> None:
        # Linux keeps a niceness per thread: the engines get the CPU before the stack (LATENCY_NICE)
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LATENCY_NICE)
        self.loop.run_forever()

    def stop(self) -> None:
        async def _close() -> None:
            for server in self._servers:
                server.close()
            for engine in self._engines.values():
                await engine.stop()
            self._llama.close()  # llama-server, stopped by its process id

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def listen(self, address: str, api: APIServer, port: int = 80) -> None:
        """Serve the data plane of the cluster behind ``api`` on ``address``:``port``."""

        async def _start() -> None:
            server = await asyncio.start_server(
                lambda r, w: self._connection(r, w, api), address, port
            )
            self._servers.append(server)

        asyncio.run_coroutine_threadsafe(_start(), self.loop).result(10)

    def service_proxy(self, cluster_ip: str, port: int, upstream: tuple[str, int]) -> bool:
        """Forward ``cluster_ip:port`` to ``upstream`` (kube-proxy's part); True when the
        listener is new (the caller has put the address on ``lo``)."""
        key = (cluster_ip, port)
        new = key not in self.services
        self.services[key] = upstream
        if not new:
            return False

        async def _start() -> None:
            server = await asyncio.start_server(lambda r, w: self._tcp(r, w, key), cluster_ip, port)
            self._servers.append(server)

        asyncio.run_coroutine_threadsafe(_start(), self.loop).result(10)
        return True

    def _held(self) -> Callable[[], None]:
        """Holds the running connection's task until the returned call releases it."""
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        return lambda: self._connections.discard(task)

    async def _tcp(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: tuple[str, int]
    ) -> None:
        release = self._held()
        try:
            await self._pipe_both(reader, writer, key)
        finally:
            release()

    async def _pipe_both(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: tuple[str, int]
    ) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.services[key])
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while chunk := await src.read(65536):
                    dst.write(chunk)
                    await dst.drain()
                if dst.can_write_eof():
                    dst.write_eof()
            except (ConnectionError, OSError):
                pass

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            up_writer.close()
            writer.close()

    @staticmethod
    def addresses_of(slices: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[str, int]]:
        return backend_addresses(slices)

    def count(self, namespace: str, replica: str) -> int:
        """Chat completions the data plane forwarded to one replica's engine."""
        return self.requests[(namespace, replica)]

    # --- the data plane ---------------------------------------------------------------------

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api: APIServer
    ) -> None:
        release = self._held()
        try:
            await self._requests(reader, writer, api)
        finally:
            release()

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api: APIServer
    ) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, version = lines[0].split(" ", 2)
                headers = [line for line in lines[1:] if line]
                length = 0
                for line in headers:
                    key, _, value = line.partition(":")
                    if key.strip().lower() == "content-length":
                        length = int(value.strip())
                body = await reader.readexactly(length) if length else b""
                host = next(
                    (h.partition(":")[2].strip() for h in headers if h.lower().startswith("host:")),
                    "",
                )
                route = _route(self.routes.get(api.name, []), path, host)
                if route is None:
                    payload = json.dumps({"error": f"no route for {path}"}).encode()
                    writer.write(
                        b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(payload)}\r\n\r\n".encode()
                        + payload
                    )
                    await writer.drain()
                    continue
                backend = _backend(route[3], self.backends.get(api.name, {}), path, route[2])
                if backend is not None:
                    (host, port), rest = backend
                    await _forward(host, port, method, rest, version, headers, body, writer)
                    continue
                namespace, replica, prefix, _ = route
                rest = "/" + path[len(prefix) :].lstrip("/")
                if rest.startswith("/v1/chat/completions"):
                    self.attempts[namespace] += 1
                    self.last_attempt[namespace] = time.monotonic()
                if (namespace, labels.value(replica)) not in self.ready.get(api.name, set()):
                    payload = b"no healthy upstream"
                    writer.write(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                        + f"Content-Length: {len(payload)}\r\n\r\n".encode()
                        + payload
                    )
                    await writer.drain()
                    continue
                engine = self.policy(namespace, replica)
                if rest.startswith("/v1/chat/completions"):
                    self.requests[(namespace, replica)] += 1
                    self.answered_by[engine] += 1
                host, port = await self._upstream(engine)
                if engine == LLAMA_SERVER:
                    # llama-server cancels a request whose client half-closed: ask it to close
                    headers = [h for h in headers if not h.lower().startswith("connection:")]
                    headers.append("Connection: close")
                half_close = engine != LLAMA_SERVER
                await _forward(host, port, method, rest, version, headers, body, writer, half_close)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def _upstream(self, engine: Engine) -> tuple[str, int]:
        if engine == LLAMA_SERVER:
            url = await self.loop.run_in_executor(None, self.llama_server)
            host, _, port = url.removeprefix("http://").partition(":")
            return host, int(port)
        assert isinstance(engine, Behaviour), engine
        if engine not in self._engines:
            self._engines[engine] = await FakeServer(engine).start()
        return self._engines[engine].host, self._engines[engine].port

    def llama_server(self) -> str:
        """llama-server's base URL on 127.0.0.1, started on first use with the tiny GGUF."""
        from tests.engine import llama_server, tiny_gguf

        with self._lock:
            if self._llama_url is None:
                logs = self.simulator.plane.dir / "logs"
                # smaller than the engine tests' model: the seed's budget is a GPU's (p95 TTFT
                # 250 ms), and the gate sends prompts of over a thousand tokens concurrently to
                # one CPU thread beside the busy stack (the engine tests' model: p95 756 ms)
                model = tiny_gguf.write(
                    self.simulator.plane.dir / "tiny.gguf",
                    layers=1,
                    embedding=64,
                    heads=2,
                    feed_forward=128,
                )
                self._llama_url = self._llama.enter_context(
                    llama_server.serving(model, log=logs / "llama-server.log", nice=LATENCY_NICE)
                )
            return self._llama_url


async def _forward(
    host: str,
    port: int,
    method: str,
    path: str,
    version: str,
    headers: list[str],
    body: bytes,
    writer: asyncio.StreamWriter,
    half_close: bool = True,
) -> None:
    """One request to the engine on a connection of its own; its bytes back as they come.
    ``half_close``: end the request by closing the sending side (the fake engines answer one
    request per connection), else the request says `Connection: close`."""
    up_reader, up_writer = await asyncio.open_connection(host, port)
    try:
        up_writer.write(
            f"{method} {path} {version}\r\n".encode()
            + "".join(f"{h}\r\n" for h in headers).encode("latin-1")
            + b"\r\n"
            + body
        )
        await up_writer.drain()
        if half_close:
            up_writer.write_eof()  # one request: the engine closes after answering it
        while chunk := await up_reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    finally:
        up_writer.close()


def backend_addresses(slices: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[str, int]]:
    """(address, port) of each Service with a ready endpoint, from its EndpointSlices."""
    out = {}
    for eps in slices:
        meta = eps["metadata"]
        service = (meta.get("labels") or {}).get("kubernetes.io/service-name")
        ports = eps.get("ports") or []
        for endpoint in eps.get("endpoints") or []:
            if service and ports and endpoint.get("addresses"):
                out[(meta["namespace"], service)] = (endpoint["addresses"][0], ports[0]["port"])
    return out


def _backend(
    route: dict[str, Any],
    backends: dict[tuple[str, str], tuple[str, int]],
    path: str,
    prefix: str,
) -> tuple[tuple[str, int], str] | None:
    """Where a route with backendRefs sends ``path``: a backend drawn by weight, and the path
    with the prefix replaced as its URLRewrite says. None for a route without backendRefs."""
    namespace = route["metadata"].get("namespace", "")
    refs = [
        ref
        for rule in (route.get("spec") or {}).get("rules") or []
        for ref in rule.get("backendRefs") or []
        if (namespace, ref.get("name")) in backends and ref.get("weight", 1) > 0
    ]
    if not refs:
        return None
    ref = random.choices(refs, weights=[r.get("weight", 1) for r in refs])[0]
    rest = path[len(prefix.rstrip("/")) :]
    for f in ref.get("filters") or []:
        replacement = ((f.get("urlRewrite") or {}).get("path") or {}).get("replacePrefixMatch")
        if replacement is not None:
            rest = replacement.rstrip("/") + "/" + rest.lstrip("/")
    return backends[(namespace, ref["name"])], rest or "/"


def _host_rank(route: dict[str, Any], host: str) -> int:
    """How a route's hostnames match the request's Host (its port left out), as Gateway API
    ranks them: 2 a listed name, 1 a wildcard covering it, 0 no hostnames, -1 no match."""
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host
    hostnames = (route.get("spec") or {}).get("hostnames") or []
    if not hostnames:
        return 0
    if name in hostnames:
        return 2
    if any(h.startswith("*.") and name.endswith(h[1:]) for h in hostnames):
        return 1
    return -1


def _route(
    routes: list[dict[str, Any]], path: str, host: str = ""
) -> tuple[str, str, str, dict[str, Any]] | None:
    """(namespace, replica, matched prefix, route) of the best match: among the routes whose
    hostnames match ``host`` best and match the path at all, the longest PathPrefix; None when
    none matches."""
    ranked = [(r, _host_rank(r, host)) for r in routes]
    for rank in (2, 1, 0):
        best = _longest([r for r, of in ranked if of == rank], path)
        if best is not None:
            return best
    return None


def _longest(
    routes: list[dict[str, Any]], path: str
) -> tuple[str, str, str, dict[str, Any]] | None:
    best: tuple[str, str, str, dict[str, Any]] | None = None
    for route in routes:
        meta = route["metadata"]
        for rule in (route.get("spec") or {}).get("rules") or []:
            for match in rule.get("matches") or []:
                p = match.get("path") or {}
                prefix = p.get("value", "")
                if p.get("type", "PathPrefix") != "PathPrefix" or not prefix:
                    continue
                if (path == prefix or path.startswith(prefix.rstrip("/") + "/")) and (
                    best is None or len(prefix) > len(best[2])
                ):
                    replica = prefix.strip("/").split("/")[-1]
                    best = (meta.get("namespace", ""), replica, prefix, route)
    return best
