"""The function runtime: names, Fatal results instead of exceptions, and real gRPC serving."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from plnt import xp
from plnt_host import procs, runtime
from tests import leftovers


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("plnt-function-model-replica", "model_replica"),
        ("function-model-replica", "model_replica"),
        ("model-replica", "model_replica"),
    ],
)
def test_module_name(name: str, module: str) -> None:
    assert runtime.module_name(name) == module


def test_unknown_function_lists_known_ones() -> None:
    with pytest.raises(runtime.UnknownFunction, match="unknown function 'function-nope'"):
        runtime.load("function-nope")


def test_invalid_input_and_bugs_become_fatal_results() -> None:
    def invalid(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        raise xp.InvalidInput("spec.nodePools[0].gpu", "required when role is GPU")

    def buggy(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        raise KeyError("token-abc123")

    req = fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag="t1"))
    rsp = runtime.call_sync(invalid, req, "function-x")
    assert rsp.meta.tag == "t1"
    assert [(r.severity, r.message) for r in rsp.results] == [
        (fnv1.SEVERITY_FATAL, "invalid input: spec.nodePools[0].gpu: required when role is GPU")
    ]
    rsp = runtime.call_sync(buggy, req, "function-x")
    assert rsp.results[0].severity == fnv1.SEVERITY_FATAL
    assert "internal error (KeyError)" in rsp.results[0].message
    assert "token-abc123" not in rsp.results[0].message


def test_plnt_function_serves_grpc_as_crossplane_calls_it(tmp_path: pathlib.Path) -> None:
    names = runtime.function_names()
    assert names, "no functions under functions/"
    address = f"127.0.0.1:{procs.free_port()}"
    plnt = pathlib.Path(sys.executable).parent / "plnt"
    proc = subprocess.Popen([str(plnt), "function", names[0], "--insecure", "--address", address])
    try:
        procs.wait_ready(address, proc)
        with grpc.insecure_channel(address) as channel:
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            rsp = stub.RunFunction(
                fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag="abc")), timeout=10
            )
        assert rsp.meta.tag == "abc"
        # An empty request is not valid input for any function: it says so, it does not crash.
        assert rsp.results and rsp.results[0].severity == fnv1.SEVERITY_FATAL
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_stopped_function_server_leaves_no_process_running(stop: signal.Signals) -> None:
    """However the server ends, its worker processes and multiprocessing's resource tracker end
    with it: a killed server's workers would otherwise wait, orphaned, for calls that never come."""
    address = f"127.0.0.1:{procs.free_port()}"
    plnt = pathlib.Path(sys.executable).parent / "plnt"
    server = subprocess.Popen(
        [str(plnt), "function", "function-model-replica", "--insecure", "--address", address]
    )
    started: list[leftovers.Process] = []
    try:
        procs.wait_ready(address, server)
        started = leftovers.children(server.pid)
        commands = " ".join(p.command for p in started)
        assert "spawn_main" in commands and "resource_tracker" in commands, started
        os.kill(server.pid, stop)
        server.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(leftovers.running(p.pid) for p in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [p for p in started if leftovers.running(p.pid)] == []
    finally:
        for process in [server.pid, *(p.pid for p in started)]:
            if leftovers.running(process):
                os.kill(process, signal.SIGKILL)
        server.wait(timeout=10)


def test_a_second_function_server_on_a_port_in_use_fails_to_start() -> None:
    """gRPC would share the port (SO_REUSEPORT) and the kernel split the callers between the two
    servers: Crossplane's calls for one function answered by another."""
    address = f"127.0.0.1:{procs.free_port()}"
    plnt = pathlib.Path(sys.executable).parent / "plnt"
    first = subprocess.Popen(
        [str(plnt), "function", "function-model-replica", "--insecure", "--address", address]
    )
    second: subprocess.Popen[bytes] | None = None
    try:
        procs.wait_ready(address, first)
        second = subprocess.Popen(
            [str(plnt), "function", "function-model-endpoint", "--insecure", "--address", address],
            stderr=subprocess.PIPE,
        )
        _, err = second.communicate(timeout=60)
        assert second.returncode != 0, err.decode()
        assert address in err.decode()
        assert first.poll() is None
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)


def test_free_port_never_hands_out_the_same_port_twice() -> None:
    ports = [procs.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)


def test_plnt_function_requires_a_transport_choice() -> None:
    plnt = pathlib.Path(sys.executable).parent / "plnt"
    proc = subprocess.run(
        [str(plnt), "function", "function-nope", "--insecure"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "unknown function" in proc.stderr


def test_admission_refuses_what_cannot_finish_within_its_deadline() -> None:
    admission = runtime.Admission(workers=2, limit=10)
    admission.service_s = 0.1
    for _ in range(6):
        assert admission.refusal(remaining_s=1.0) is None
        admission.enter()
    # Six ahead on two workers: (6/2 + 1) * 0.1 s = 0.4 s, inside 0.8 of a 1 s deadline.
    assert admission.refusal(remaining_s=1.0) is None
    # The same wait does not fit in 0.8 of 0.45 s: refused at once, saying why.
    refusal = admission.refusal(remaining_s=0.45)
    assert refusal is not None and "6 calls ahead" in refusal and "0.4 s to answer" in refusal
    assert runtime.Admission(workers=2, estimate=False).refusal(remaining_s=0.0) is None
    assert admission.refusal(remaining_s=None) is None  # no deadline: only the limit applies
    for _ in range(4):
        admission.enter()
    assert "limit 10" in (admission.refusal(remaining_s=None) or "")


def test_admission_learns_how_long_a_call_holds_a_worker() -> None:
    admission = runtime.Admission(workers=1)
    assert admission.service_s == runtime.INITIAL_SERVICE_S  # high, before anything is measured
    for _ in range(100):
        admission.enter()
        admission.leave(0.002)
    assert admission.service_s == pytest.approx(0.002, rel=0.01)
    admission.enter()
    admission.leave(None)  # a call that never reached a worker says nothing about its cost
    assert admission.service_s == pytest.approx(0.002, rel=0.01)
    assert admission.admitted == 0
