"""The function runtime: load a function by name and serve it over gRPC as Crossplane calls it.

Every function lives in ``functions/<module>/fn.py`` and exposes
``run_function(req: RunFunctionRequest) -> RunFunctionResponse`` (plain or ``async``).
Its package name is ``function-<module with dashes>`` (``functions/model_replica`` is
``function-model-replica``); Crossplane knows the installed Function as
``plnt-function-model-replica``, which is what Compositions reference.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import gc
import importlib
import inspect
import logging
import multiprocessing
import os
import pkgutil
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import grpc
from crossplane.function import runtime as sdk_runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from grpc_reflection.v1alpha import reflection

import functions as functions_pkg
from plnt import xp
from plnt_host import trust

log = logging.getLogger("plnt.function")

FUNCTION_PREFIX = "function-"
INSTALLED_PREFIX = "plnt-"
# A 1,000-cluster fleet in required resources is several MB; gRPC's default cap is 4 MiB.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# A fleet-wide reconcile at 10,000 clusters allocates millions of short-lived objects: with the
# default young-generation threshold (700) it spent 30% of its CPU in the collector.
GC_YOUNG_THRESHOLD = 50_000

PlainRunFunction = Callable[[fnv1.RunFunctionRequest], fnv1.RunFunctionResponse]
AsyncRunFunction = Callable[[fnv1.RunFunctionRequest], Awaitable[fnv1.RunFunctionResponse]]
RunFunction = PlainRunFunction | AsyncRunFunction


class UnknownFunction(LookupError):  # noqa: N818 (reads better at the call site)
    pass


def module_name(function_name: str) -> str:
    """``plnt-function-model-replica`` / ``function-model-replica`` -> ``model_replica``."""
    name = function_name.removeprefix(INSTALLED_PREFIX).removeprefix(FUNCTION_PREFIX)
    return name.replace("-", "_")


def function_names() -> list[str]:
    """Every function this distribution carries, as package names."""
    return sorted(
        FUNCTION_PREFIX + m.name.replace("_", "-")
        for m in pkgutil.iter_modules(functions_pkg.__path__)
        if m.ispkg
    )


def load(function_name: str) -> RunFunction:
    mod = module_name(function_name)
    try:
        module = importlib.import_module(f"functions.{mod}.fn")
    except ModuleNotFoundError as err:
        if err.name and err.name.startswith(f"functions.{mod}"):
            known = ", ".join(function_names())
            raise UnknownFunction(f"unknown function {function_name!r} (known: {known})") from None
        raise
    return module.run_function


def keeps_state(function_name: str) -> bool:
    """True for a function whose calls share state in its process (the canary gate's
    measurements outlive the call that starts them): it runs in the serving process, on a
    thread, never in a worker process of its own."""
    module = importlib.import_module(f"functions.{module_name(function_name)}.fn")
    return bool(getattr(module, "KEEPS_STATE", False))


def _plain(run: RunFunction) -> PlainRunFunction | None:
    """The function itself when it is plain (synchronous), None for an async one."""
    return None if inspect.iscoroutinefunction(run) else cast(PlainRunFunction, run)


async def call(
    run: RunFunction, req: fnv1.RunFunctionRequest, name: str
) -> fnv1.RunFunctionResponse:
    """Runs a function on what it may trust of the request (see `plnt_host.trust`) and guarantees a
    response: invalid input and bugs become Fatal results. A plain function runs right here."""
    plain = _plain(run)
    if plain is not None:
        return call_blocking(plain, req, name)
    try:
        screened = _screen(req)
        rsp = await _awaited(run(screened.request))
        impostors = trust.impostors_after(screened, rsp)
        if impostors:
            screened = trust.without_impostors(screened, impostors)
            rsp = await _awaited(run(screened.request))
        return _with_warnings(rsp, screened)
    except Exception as err:
        return _failed(req, err, name)


def call_blocking(
    run: PlainRunFunction, req: fnv1.RunFunctionRequest, name: str
) -> fnv1.RunFunctionResponse:
    """`call` for a plain (synchronous) function, without an event loop: the server runs it in a
    worker thread so that its event loop stays free to accept, refuse and answer calls."""
    try:
        screened = _screen(req)
        rsp = run(screened.request)
        impostors = trust.impostors_after(screened, rsp)
        if impostors:
            screened = trust.without_impostors(screened, impostors)
            rsp = run(screened.request)
        return _with_warnings(rsp, screened)
    except Exception as err:
        return _failed(req, err, name)


def _screen(req: fnv1.RunFunctionRequest) -> trust.Screened:
    trust.check_composite(req)
    return trust.screen(req)


async def _awaited(rsp: Any) -> fnv1.RunFunctionResponse:
    return await rsp if inspect.isawaitable(rsp) else rsp


def _with_warnings(rsp: Any, screened: trust.Screened) -> fnv1.RunFunctionResponse:
    if inspect.isawaitable(rsp):  # a plain function that returned an awaitable: a bug
        raise TypeError("a synchronous run_function returned an awaitable")
    for warning in screened.warnings:
        xp.warning(rsp, warning)
    return rsp


def _failed(req: fnv1.RunFunctionRequest, err: Exception, name: str) -> fnv1.RunFunctionResponse:
    rsp = xp.respond(req)
    if isinstance(err, xp.InvalidInput):
        xp.fatal(rsp, f"invalid input: {err}")
        return rsp
    # The message names the failure, never request data (it may hold credentials).
    log.error("%s failed", name, exc_info=err)
    xp.fatal(rsp, f"{name}: internal error ({type(err).__name__}); see the function's log")
    return rsp


def call_sync(
    run: RunFunction, req: fnv1.RunFunctionRequest, name: str
) -> fnv1.RunFunctionResponse:
    """`call` for synchronous callers (render, tests, benchmarks)."""
    plain = _plain(run)
    if plain is not None:
        return call_blocking(plain, req, name)
    return asyncio.run(call(run, req, name))


# --- serving under load -----------------------------------------------------------------------

# Worker processes for plain functions, one per core: each has its own GIL, so the serving
# process's event loop never competes with a function for the interpreter and stays free to
# accept, refuse and answer calls however busy the CPU is.
WORKERS = max(1, len(os.sched_getaffinity(0)))
# Calls admitted at once (running or waiting for a worker); beyond, RESOURCE_EXHAUSTED at once.
MAX_ADMITTED = 2000
# A call is refused when its expected wait plus run leaves less than this share of its deadline
# unused: Crossplane retries a refusal on its next reconcile, a timeout costs it the deadline.
DEADLINE_MARGIN = 0.8
# How long gRPC core may hold a call the event loop has not picked up yet (beyond any deadline
# Crossplane sets, so that gRPC never cancels a call on its own; 30 s by default).
UNREQUESTED_LIMIT_S = 600
# The first calls' expected duration, before any has been measured: on the high side, so that a
# burst arriving before the first answer is refused rather than admitted to time out.
INITIAL_SERVICE_S = 0.05


class Admission:
    """Bounded admission that refuses fast rather than letting a call run out its deadline.

    Keeps an exponentially weighted mean of how long a call holds a worker; a new call is
    admitted when fewer than `limit` are in, and the calls ahead of it plus its own run fit in
    DEADLINE_MARGIN of its remaining deadline. Single-threaded: used on the event loop only.
    """

    def __init__(self, workers: int, limit: int = MAX_ADMITTED, *, estimate: bool = True) -> None:
        self.workers = workers
        self.limit = limit
        self.estimate = estimate  # off for async functions: they wait on I/O, not on a worker
        self.admitted = 0
        self.service_s = INITIAL_SERVICE_S
        self.refused = 0

    def refusal(self, remaining_s: float | None) -> str | None:
        """Why a new call with remaining_s of deadline is refused, or None to admit it."""
        if self.admitted >= self.limit:
            return f"overloaded: {self.admitted} calls in progress (limit {self.limit})"
        expected = (self.admitted / self.workers + 1) * self.service_s
        if self.estimate and remaining_s is not None and expected > DEADLINE_MARGIN * remaining_s:
            return (
                f"overloaded: {self.admitted} calls ahead, about {expected:.1f} s to answer, "
                f"{remaining_s:.1f} s of deadline left"
            )
        return None

    def enter(self) -> None:
        self.admitted += 1

    def leave(self, service_s: float | None) -> None:
        """A call left; service_s is how long it held a worker (None: not measured)."""
        self.admitted -= 1
        if service_s is not None:
            self.service_s += 0.1 * (service_s - self.service_s)


# In a worker process: the function it runs, loaded once by name.
_worker: tuple[str, PlainRunFunction] | None = None


# prctl(2): the signal a process gets when the thread that started it ends.
PR_SET_PDEATHSIG = 1


def _end_with_parent(parent: int) -> None:
    """A worker ends when the serving process ends, however it ends. A server killed with
    SIGKILL runs no clean-up, and its workers would wait forever on a call queue whose write end
    they hold themselves (and keep the resource tracker, which waits for them, running), orphaned
    to init. The serving process starts its workers from its main thread (Servicer.start and the
    event loop's submissions), so that thread ending is the process ending."""
    if sys.platform != "linux":  # prctl is Linux's; elsewhere a killed server's workers remain
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the server ended before the request took effect
        os._exit(1)


def _start_worker(function_name: str, parent: int) -> None:
    global _worker  # noqa: PLW0603 (one per worker process)
    _end_with_parent(parent)
    plain = _plain(load(function_name))
    if plain is None:
        raise TypeError(f"{function_name} is async: it runs on the event loop, not in a worker")
    _worker = (function_name, plain)
    tune_gc()


def _run_in_worker(
    request: bytes, deadline: float | None
) -> tuple[bytes | None, float | None, str]:
    """One call in a worker process, bytes in and out (protobuf, not pickled objects), and what
    it was about (for the serving process's debug log). A call whose deadline passed while it
    waited is not run: its caller has given up, and running it would only delay the calls
    behind it. (CLOCK_MONOTONIC is the same in every process.)"""
    if deadline is not None and time.monotonic() >= deadline:
        return None, None, ""
    assert _worker is not None
    name, run = _worker
    start = time.perf_counter()
    req = fnv1.RunFunctionRequest.FromString(request)
    rsp = call_blocking(run, req, name)
    return rsp.SerializeToString(), time.perf_counter() - start, call_summary(req)


def call_summary(req: fnv1.RunFunctionRequest) -> str:
    """The XR and how many objects each required resource was answered with (no contents)."""
    meta = req.observed.composite.resource.fields.get("metadata")
    fields = meta.struct_value.fields if meta is not None else {}
    xr = "/".join(fields[k].string_value for k in ("namespace", "name") if k in fields) or "(no XR)"
    answered = ",".join(f"{n}={len(r.items)}" for n, r in sorted(req.required_resources.items()))
    return f"{xr} required[{answered}]"


class Servicer:
    """The gRPC FunctionRunnerService over one function, v1 and v1beta1 (wire-compatible).

    Requests arrive as bytes and a plain function's answer leaves as bytes: the serving process
    parses nothing for it. A worker process parses, runs and serializes; the event loop only
    admits or refuses, hands bytes over and sends bytes back, so it stays free however busy the
    CPU is. An async function (the canary gate's network I/O) runs on the loop, which it does
    not block. Admission decides first: what cannot finish within its deadline is refused with
    RESOURCE_EXHAUSTED at once.
    """

    def __init__(self, function_name: str, *, workers: int = WORKERS):
        self.name = function_name
        self.run = load(function_name)
        self.plain = _plain(self.run)
        self.blocking = self.plain is not None
        self.in_process = keeps_state(function_name)
        self.workers = workers
        self.admission = Admission(workers, estimate=self.blocking)
        self.pool: concurrent.futures.ProcessPoolExecutor | None = None

    def start(self) -> None:
        """Start the worker processes (spawned, never forked) and warm them before serving."""
        if not self.blocking or self.in_process:
            return
        self.pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker,
            initargs=(self.name, os.getpid()),
        )
        concurrent.futures.wait([self.pool.submit(time.monotonic) for _ in range(self.workers)])

    def stop(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        """RunFunction of both service versions, bytes in and out (no (de)serializers)."""
        method: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
            "RunFunction": grpc.unary_unary_rpc_method_handler(self.run_function)
        }
        return [grpc.method_handlers_generic_handler(name, method) for name in SERVICES]

    async def run_function(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        remaining = context.time_remaining()
        refusal = self.admission.refusal(remaining)
        if refusal is not None:
            self.admission.refused += 1
            if self.admission.refused % 100 == 1:  # one line per hundred, not a flood
                log.warning(
                    "%s: %s (%d refused so far)", self.name, refusal, self.admission.refused
                )
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        if self.plain is None:
            req = fnv1.RunFunctionRequest.FromString(request)
            return (await call(self.run, req, self.name)).SerializeToString()
        if self.pool is None:  # state shared across calls: this process, off the event loop
            req = fnv1.RunFunctionRequest.FromString(request)
            rsp = await asyncio.to_thread(call_blocking, self.plain, req, self.name)
            return rsp.SerializeToString()
        self.admission.enter()
        service_s = None
        try:
            deadline = None if remaining is None else time.monotonic() + remaining
            loop = asyncio.get_running_loop()
            try:
                data, service_s, about = await loop.run_in_executor(
                    self.pool, _run_in_worker, request, deadline
                )
            except concurrent.futures.BrokenExecutor as err:  # a worker died (killed, OOM)
                log.error("%s: a worker process died; starting new ones", self.name)
                self.stop()
                self.start()
                req = fnv1.RunFunctionRequest.FromString(request)
                return _failed(req, err, self.name).SerializeToString()
            if data is None:
                await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed")
            log.debug(
                "%s: %s: request %d bytes, response %d bytes, %.1f ms",
                self.name, about, len(request), len(data), (service_s or 0) * 1000,
            )  # fmt: skip
            return data
        finally:
            self.admission.leave(service_s)


SERVICES = (
    fnv1.DESCRIPTOR.services_by_name["FunctionRunnerService"].full_name,
    fnv1beta1.DESCRIPTOR.services_by_name["FunctionRunnerService"].full_name,
)


def tune_gc() -> None:
    """What imports made lives as long as the server (frozen out of collections), and young
    collections come every GC_YOUNG_THRESHOLD allocations (`plnt bench --only fleet`)."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def serve(
    function_name: str,
    address: str = "0.0.0.0:9443",
    *,
    insecure: bool = False,
    tls_certs_dir: str | None = None,
) -> None:
    """Serves until SIGTERM as the SDK does (v1 and v1beta1 services, reflection), with the
    function's work off the event loop and admission bounded (see Servicer, Admission)."""
    servicer = Servicer(function_name)
    tune_gc()
    creds = sdk_runtime.load_credentials(tls_certs_dir) if tls_certs_dir else None
    if creds is None and not insecure:
        raise ValueError("either --insecure or --tls-certs-dir is required")
    log.info("serving %s on %s (%s)", function_name, address, "mTLS" if creds else "insecure")
    servicer.start()
    try:
        asyncio.run(_serve(servicer, address, creds))
    finally:
        servicer.stop()


async def _serve(servicer: Servicer, address: str, creds: grpc.ServerCredentials | None) -> None:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # gRPC core cancels a call Python has not picked up within this time (30 s by
            # default: the silent CANCELLED under CPU contention). Every call is picked up and
            # answered or refused by Admission instead; its deadline still bounds it.
            ("grpc.server_max_unrequested_time_in_server", UNREQUESTED_LIMIT_S),
            # gRPC binds with SO_REUSEPORT by default: a second server on a port in use would
            # start as if alone and the kernel would split the callers between the two (a
            # Crossplane step answered by another function). The bind fails instead.
            ("grpc.so_reuseport", 0),
        ],
        # gRPC's own hard cap, above the admission limit: refused by gRPC core before Python.
        maximum_concurrent_rpcs=MAX_ADMITTED + 100,
    )
    server.add_generic_rpc_handlers(servicer.handlers())
    reflection.enable_server_reflection(sdk_runtime.SERVICE_NAMES, server)
    if creds is not None:
        server.add_secure_port(address, creds)
    else:
        server.add_insecure_port(address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    try:
        await stop.wait()
    finally:
        await server.stop(grace=sdk_runtime.SHUTDOWN_GRACE_PERIOD_SECONDS)
