"""Every function serves mTLS with --tls-certs-dir: only a client of the right CA gets in."""

from __future__ import annotations

import pathlib

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from plnt import procs, runtime
from tests.robustness import certs

FUNCTIONS = runtime.function_names()


def call(address: str, credentials: grpc.ChannelCredentials | None) -> fnv1.RunFunctionResponse:
    channel = (
        grpc.secure_channel(address, credentials) if credentials else grpc.insecure_channel(address)
    )
    with channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        return stub.RunFunction(fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag="m")), timeout=5)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[certs.PKI, pathlib.Path]:
    directory = tmp_path_factory.mktemp("tls")
    return certs.make(directory), directory


@pytest.mark.parametrize("name", FUNCTIONS)
def test_function_serves_mtls_only_to_trusted_clients(
    name: str, pki: tuple[certs.PKI, pathlib.Path]
) -> None:
    bundle, directory = pki
    good = grpc.ssl_channel_credentials(bundle.ca.cert, bundle.client.key, bundle.client.cert)
    address = f"127.0.0.1:{procs.free_port()}"
    proc = procs.start(name, address, ("--tls-certs-dir", str(directory)))
    try:
        procs.wait_ready(address, proc, credentials=good)
        assert call(address, good).meta.tag == "m"

        failures = {
            "plaintext": None,
            "wrong CA": grpc.ssl_channel_credentials(
                bundle.other_ca.cert, bundle.client.key, bundle.client.cert
            ),
            "no client certificate": grpc.ssl_channel_credentials(bundle.ca.cert),
            "client certificate from another CA": grpc.ssl_channel_credentials(
                bundle.ca.cert, bundle.stranger.key, bundle.stranger.cert
            ),
        }
        for what, creds in failures.items():
            with pytest.raises(grpc.RpcError) as err:
                call(address, creds)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE, what
    finally:
        procs.stop([proc])
