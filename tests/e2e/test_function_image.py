"""The suite's live control plane runs plnt-function-inference-class from its built image under
runc (tests/e2e/images.py: read-only root, Crossplane's pod user, the certificates at
/tls/server), not from the virtualenv; an InferenceClass composes through it."""

from __future__ import annotations

import pathlib

from tests.e2e import live, stack

API = "modelplane.ai/v1alpha1"
CLASS = "plnt-e2e-image-a100"


def test_an_xr_composes_through_the_function_run_from_its_image(plane) -> None:
    (package,) = stack.FUNCTIONS_FROM_IMAGES
    name = f"plnt-{package}"
    container = plane.images.running[name].running
    assert name not in plane.procs.running  # no virtualenv process serves it
    pid = container.pid()
    root = pathlib.Path(f"/proc/{pid}/root")
    # the image's own interpreter, from its read-only rootfs, as Crossplane's pod user
    assert (root / "usr/local/lib/python3.11/dist-packages/plnt").is_dir()
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    assert next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1] == "2000"
    mounts = {
        line.split()[4]: set(line.split()[5].split(","))
        for line in pathlib.Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    }
    assert "ro" in mounts["/"]
    assert "ro" in mounts["/tls/server"]

    plane.mgmt.apply(
        {
            "apiVersion": API,
            "kind": "InferenceClass",
            "metadata": {"name": CLASS},
            "spec": {
                "description": "8x NVIDIA A100 80GB per node",
                "devices": [
                    {
                        "name": "gpu",
                        "claim": "Synthetic",
                        "driver": "gpu.nvidia.com",
                        "count": 8,
                        "attributes": {"productName": {"string": "NVIDIA A100"}},
                    }
                ],
            },
        }
    )
    try:
        xr = live.wait_object(
            plane.mgmt,
            API,
            "InferenceClass",
            CLASS,
            until=lambda o: live.is_true(o, "Usable"),
            seconds=120,
            what=f"InferenceClass {CLASS} Usable",
        )
        assert xr["status"]["gpu"] is True
        assert xr["status"]["devices"] == [
            {"name": "gpu", "claim": "Synthetic", "count": 8, "driver": "gpu.nvidia.com"}
        ]
        assert live.condition(xr, "Usable")["message"] == (
            "8x gpu per node; not provisionable (Existing clusters only)"
        )
    finally:
        plane.mgmt.delete(API, "InferenceClass", CLASS)
