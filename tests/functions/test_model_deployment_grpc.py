"""A 1,000-cluster fleet over real gRPC: the request is several MB, past gRPC's 4 MiB default."""

from __future__ import annotations

import pathlib

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from plnt_host import procs, runtime
from plnt_host.bench import scheduler as bench_scheduler

# What a real InferenceCluster carries beside its spec (last-applied annotation, managed fields).
PADDING = "x" * 5000


def test_a_1000_cluster_request_is_accepted(tmp_path: pathlib.Path) -> None:
    req = bench_scheduler.request(1000, 8, 100)
    for item in req.required_resources["inference-clusters"].items:
        meta = item.resource.fields["metadata"].struct_value
        meta.fields["annotations"].struct_value.update({"example.com/padding": PADDING})
    size = req.ByteSize()
    assert size > 5 * 1024 * 1024  # more than gRPC's 4 MiB default would take

    options = [
        ("grpc.max_send_message_length", runtime.MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", runtime.MAX_MESSAGE_BYTES),
    ]
    log = tmp_path / "server.log"
    with (
        procs.serving("function-model-deployment", log=log) as (address, _),
        grpc.insecure_channel(address, options=options) as channel,
    ):
        rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=60)
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    replicas = [n for n in rsp.desired.resources if n.startswith("replica-")]
    assert len(replicas) == 100
