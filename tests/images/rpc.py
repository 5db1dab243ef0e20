"""One RunFunction over mTLS, run as its own process so it can sit inside a network namespace:

    nsenter --net=NETNS python -m tests.images.rpc ADDRESS CERT_DIR REQUEST RESPONSE

CERT_DIR holds ca.crt, client.crt and client.key; REQUEST and RESPONSE are files holding a
serialized RunFunctionRequest and (written) RunFunctionResponse. Exit 1 with the gRPC status on
stderr when the call fails.
"""

from __future__ import annotations

import pathlib
import sys

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

TIMEOUT_SECONDS = 30


def main(argv: list[str]) -> int:
    address, cert_dir, request, response = argv
    certs = pathlib.Path(cert_dir)
    credentials = grpc.ssl_channel_credentials(
        (certs / "ca.crt").read_bytes(),
        (certs / "client.key").read_bytes(),
        (certs / "client.crt").read_bytes(),
    )
    req = fnv1.RunFunctionRequest.FromString(pathlib.Path(request).read_bytes())
    with grpc.secure_channel(address, credentials) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        try:
            rsp = stub.RunFunction(req, timeout=TIMEOUT_SECONDS, wait_for_ready=True)
        except grpc.RpcError as err:
            sys.stderr.write(f"{err.code().name}: {err.details()}\n")
            return 1
    pathlib.Path(response).write_bytes(rsp.SerializeToString())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
