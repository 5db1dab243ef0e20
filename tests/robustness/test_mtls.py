"""Every function serves mTLS with --tls-certs-dir: only a client of the right CA gets in."""

from __future__ import annotations

import os
import pathlib
import subprocess

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from plnt_host import procs, runtime
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


def test_certificate_directory_defaults_to_crossplanes_environment_variable(
    pki: tuple[certs.PKI, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    """Crossplane's package runtime passes no flags: it mounts the certificates at /tls/server
    and sets TLS_SERVER_CERTS_DIR. `plnt function NAME` alone must then serve mTLS."""
    bundle, directory = pki
    good = grpc.ssl_channel_credentials(bundle.ca.cert, bundle.client.key, bundle.client.cert)
    address = f"127.0.0.1:{procs.free_port()}"
    env = {**os.environ, "TLS_SERVER_CERTS_DIR": str(directory)}
    proc = subprocess.Popen(
        [str(procs.PLNT), "function", FUNCTIONS[0], "--address", address],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        procs.wait_ready(address, proc, credentials=good)
        assert call(address, good).meta.tag == "m"
        with pytest.raises(grpc.RpcError):
            call(address, None)
    finally:
        procs.stop([proc])

    # Without the variable and without flags it refuses to start, naming both ways.
    env.pop("TLS_SERVER_CERTS_DIR")
    out = subprocess.run(
        [str(procs.PLNT), "function", FUNCTIONS[0], "--address", address],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--tls-certs-dir" in out.stderr
    assert "TLS_SERVER_CERTS_DIR" in out.stderr
