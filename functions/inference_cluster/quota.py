"""InferenceQuota: checked, never composed into anything.

The binder (plnt_reconciler/binder.py) enforces a quota when it commits replicas and writes its
status (used devices, covered namespaces, reserved replicas); this step only validates the spec
(an invalid one is a Fatal result naming the field) and reports the quota Ready, with a
`Enforced` condition saying what it caps.
"""

from __future__ import annotations

from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import xp
from plnt.models.inference_quota import InferenceQuotaSpec

ENFORCED = "Enforced"


def run(rsp: fnv1.RunFunctionResponse, xr: dict[str, Any]) -> fnv1.RunFunctionResponse:
    spec = xp.parse(InferenceQuotaSpec, xr.get("spec") or {}, "spec")
    caps = ", ".join(f"{n} {cls}" for cls, n in sorted(spec.hard.devices.items()))
    if spec.hard.cache_storage is not None:
        caps += f" and {spec.hard.cache_storage} of ModelCache storage"
    xp.set_conditions(
        rsp,
        xp.Condition(
            ENFORCED,
            True,
            "ByBinder",
            f"the binder caps the covered namespaces at {caps} fleet-wide",
        ),
    )
    xp.set_composite_ready(rsp, True)
    return rsp
