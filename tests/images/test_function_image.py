"""A built function image, run for real by an OCI runtime, answers RunFunction over mTLS.

The image is taken from the function's .xpkg, the file Crossplane's package manager pulls and
whose image it runs, and run the way Crossplane's package runtime runs a function pod: runc, a
read-only root, the image's non-root user, Crossplane's certificate layout at /tls/server (named
by TLS_SERVER_CERTS_DIR, no flags), and a network namespace of its own with only loopback. The
request is the one `plnt render` sends this function for an example scenario, and the answer
must be the one the in-process function gives, field for field.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format

from plnt_host import render, runtime
from tests.images import oci
from tests.images.conftest import FUNCTION, REPO, Built
from tests.robustness import certs

EXAMPLE = REPO / "examples" / "model-replica-qwen3-8b"
PORT = 9443  # Crossplane's function port
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"


def _request_for(function: str, scenario: render.Scenario) -> fnv1.RunFunctionRequest:
    """The final request (requirements answered) that rendering the scenario sends ``function``."""
    composition = render.compositions()[(scenario.xr["apiVersion"], scenario.xr["kind"])]
    trace: list[tuple[str, fnv1.RunFunctionRequest]] = []
    render.run_pipeline(composition, scenario.xr, scenario.observed, scenario.required, trace=trace)
    (req,) = [r for name, r in trace if runtime.module_name(name) == runtime.module_name(function)]
    return req


def _pki(directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """(server certificate folder as Crossplane lays it out, the client's folder)."""
    bundle = certs.make(directory / "server")
    client = directory / "client"
    client.mkdir()
    (client / "ca.crt").write_bytes(bundle.ca.cert)
    (client / "client.crt").write_bytes(bundle.client.cert)
    (client / "client.key").write_bytes(bundle.client.key)
    stranger = directory / "stranger"
    stranger.mkdir()
    (stranger / "ca.crt").write_bytes(bundle.ca.cert)
    (stranger / "client.crt").write_bytes(bundle.stranger.cert)
    (stranger / "client.key").write_bytes(bundle.stranger.key)
    return directory / "server", client


def _mount_options(pid: int, mount_point: str) -> set[str]:
    for line in pathlib.Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == mount_point:
            return set(fields[5].split(","))
    raise AssertionError(f"{mount_point} is not mounted in the container")


def _call(
    netns: oci.NetworkNamespace,
    client: pathlib.Path,
    req: fnv1.RunFunctionRequest,
    tmp: pathlib.Path,
) -> subprocess.CompletedProcess:
    (tmp / "request.bin").write_bytes(req.SerializeToString())
    argv = [sys.executable, "-m", "tests.images.rpc", f"127.0.0.1:{PORT}", client]
    return subprocess.run(
        netns.command([*argv, tmp / "request.bin", tmp / "response.bin"]),
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.fixture(scope="module")
def bundle(built: Built, tmp_path_factory: pytest.TempPathFactory) -> oci.Bundle:
    return oci.unpack(built.artifact(FUNCTION), tmp_path_factory.mktemp("image"))


# The image's own user, and the one Crossplane's package runtime sets on function pods.
USERS = {"image-user": None, "crossplane-user": (2000, 2000)}


@pytest.mark.parametrize("user", USERS.values(), ids=USERS.keys())
def test_function_image_answers_run_function_over_mtls_under_runc(
    bundle: oci.Bundle, user: tuple[int, int] | None, tmp_path: pathlib.Path
) -> None:

    # The image as built: non-root, `plnt function NAME` and nothing else (no TLS flags), and
    # without the reconciler's Kubernetes client.
    image = bundle.config()["process"]
    assert image["user"] == {"uid": 65532, "gid": 65532}
    assert image["args"] == ["plnt", "function", FUNCTION]
    site = bundle.rootfs / SITE_PACKAGES
    assert (site / "plnt").is_dir() and (site / "grpc").is_dir()
    assert not list(site.glob("kubernetes*")), "function images leave the Kubernetes client out"
    # nor do they carry what no function runs: the reconciler, benchmarks, the test engine
    for absent in ("plnt_reconciler", "plnt_host/bench", "plnt/gate/fake_server.py"):
        assert not (site / absent).exists(), absent
    assert (site / "plnt_host" / "cli.py").is_file() and (site / "plnt" / "gate").is_dir()
    assert (bundle.rootfs / "package.yaml").is_file(), "the xpkg's package layer is on top"

    server_certs, client = _pki(tmp_path / "pki")
    scenario = render.load_scenario(EXAMPLE)
    req = _request_for(FUNCTION, scenario)
    want = runtime.call_sync(runtime.load(FUNCTION), req, FUNCTION)
    assert want.desired.resources, "the example must compose something to compare"

    log = (tmp_path / "container.log").open("w")
    with oci.NetworkNamespace() as netns:
        fn = oci.start_function(
            bundle,
            cert_dir=server_certs,
            port=PORT,
            netns=netns.path,
            workdir=tmp_path,
            user=user,
            log=log,
        )
        try:
            fn.wait_listening(timeout=90)
            pid = fn.pid()
            status = pathlib.Path(f"/proc/{pid}/status").read_text()
            uid = user[0] if user else 65532
            assert f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}" in status
            assert "ro" in _mount_options(pid, "/"), "the root filesystem is read-only"
            assert "ro" in _mount_options(pid, oci.CERTS_IN_CONTAINER)
            # Its network is the private namespace, not the host's.
            assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(netns.path).st_ino
            assert os.stat(f"/proc/{pid}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino

            call = _call(netns, client, req, tmp_path)
            assert call.returncode == 0, call.stderr
            refused = _call(netns, tmp_path / "pki" / "stranger", req, tmp_path)
            assert refused.returncode == 1, "a client certificate from another CA gets in"
        finally:
            fn.stop()
            log.close()
    assert fn.process.returncode == 0, (tmp_path / "container.log").read_text()

    got = fnv1.RunFunctionResponse.FromString((tmp_path / "response.bin").read_bytes())
    assert json_format.MessageToDict(got) == json_format.MessageToDict(want)
    kinds = {(r.resource["apiVersion"], r.resource["kind"]) for r in got.desired.resources.values()}
    assert ("kubernetes.m.crossplane.io/v1alpha1", "Object") in kinds, kinds
    assert not [r for r in got.results if r.severity == fnv1.SEVERITY_FATAL]
