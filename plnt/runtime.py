"""The function runtime: load a function by name and serve it over gRPC as Crossplane calls it.

Every function lives in ``functions/<module>/fn.py`` and exposes
``run_function(req: RunFunctionRequest) -> RunFunctionResponse`` (plain or ``async``).
Its package name is ``function-<module with dashes>`` (``functions/model_replica`` is
``function-model-replica``); Crossplane knows the installed Function as
``plnt-function-model-replica``, which is what Compositions reference.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import pkgutil
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from crossplane.function import runtime as sdk_runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

import functions as functions_pkg
from plnt import trust, xp

log = logging.getLogger("plnt.function")

FUNCTION_PREFIX = "function-"
INSTALLED_PREFIX = "plnt-"
# A 1,000-cluster fleet in required resources is several MB; gRPC's default cap is 4 MiB.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

RunFunction = Callable[[fnv1.RunFunctionRequest], "fnv1.RunFunctionResponse | Awaitable[Any]"]


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


async def call(
    run: RunFunction, req: fnv1.RunFunctionRequest, name: str
) -> fnv1.RunFunctionResponse:
    """Runs a function on what it may trust of the request (see `plnt.trust`) and guarantees a
    response: invalid input and bugs become Fatal results."""
    try:
        trust.check_composite(req)
        screened = trust.screen(req)
        rsp = await _run(run, screened.request)
        impostors = trust.impostors_after(screened, rsp)
        if impostors:
            screened = trust.without_impostors(screened, impostors)
            rsp = await _run(run, screened.request)
        for warning in screened.warnings:
            xp.warning(rsp, warning)
        return rsp
    except xp.InvalidInput as err:
        rsp = xp.respond(req)
        xp.fatal(rsp, f"invalid input: {err}")
        return rsp
    except Exception as err:
        # The message names the failure, never request data (it may hold credentials).
        log.exception("%s failed", name)
        rsp = xp.respond(req)
        xp.fatal(rsp, f"{name}: internal error ({type(err).__name__}); see the function's log")
        return rsp


async def _run(run: RunFunction, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    rsp = run(req)
    if inspect.isawaitable(rsp):
        rsp = await rsp
    return rsp


def call_sync(
    run: RunFunction, req: fnv1.RunFunctionRequest, name: str
) -> fnv1.RunFunctionResponse:
    return asyncio.run(call(run, req, name))


class Servicer(grpcv1.FunctionRunnerServiceServicer):
    """The gRPC FunctionRunnerService over one function."""

    def __init__(self, function_name: str, run: RunFunction | None = None):
        self.name = function_name
        self.run = run or load(function_name)

    async def RunFunction(  # noqa: N802 (gRPC's name)
        self, req: fnv1.RunFunctionRequest, context: grpc.aio.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        return await call(self.run, req, self.name)


def serve(
    function_name: str,
    address: str = "0.0.0.0:9443",
    *,
    insecure: bool = False,
    tls_certs_dir: str | None = None,
) -> None:
    """Serves until SIGTERM, exactly as the SDK does (v1 and v1beta1 services, reflection)."""
    servicer = Servicer(function_name)
    creds = sdk_runtime.load_credentials(tls_certs_dir) if tls_certs_dir else None
    if creds is None and not insecure:
        raise ValueError("either --insecure or --tls-certs-dir is required")
    log.info("serving %s on %s (%s)", function_name, address, "mTLS" if creds else "insecure")
    sdk_runtime.serve(
        servicer,
        address,
        creds=creds,
        insecure=insecure and creds is None,
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
