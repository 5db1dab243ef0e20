"""InferenceGrant: checked, never composed into anything.

What it grants is read where it is used: the ModelService function (paths, hostnames,
Gateways) and the ModelService and ModelEndpoint functions (endpoint networks and other
namespaces' replicas), each requiring every InferenceGrant. This
step only validates the spec (an invalid one is a Fatal result naming the field) and reports
the grant Ready, with a `Granted` condition summing it up.
"""

from __future__ import annotations

from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import xp
from plnt.models.inference_grant import InferenceGrantSpec

GRANTED = "Granted"


def run(rsp: fnv1.RunFunctionResponse, xr: dict[str, Any]) -> fnv1.RunFunctionResponse:
    spec = xp.parse(InferenceGrantSpec, xr.get("spec") or {}, "spec")
    parts = [
        f"{len(items)} {what}"
        for what, items in (
            ("path prefix(es)", spec.routes.paths),
            ("hostname(s)", spec.routes.hostnames),
            ("Gateway(s)", spec.routes.gateways),
            ("network(s)", spec.endpoints.cidrs),
            ("replica namespace(s)", spec.endpoints.replica_namespaces),
        )
        if items
    ]
    xp.set_conditions(
        rsp,
        xp.Condition(
            GRANTED,
            True,
            "ReadByFunctions",
            "the selected namespaces may use " + (", ".join(parts) or "nothing beyond their own"),
        ),
    )
    xp.set_composite_ready(rsp, True)
    return rsp
