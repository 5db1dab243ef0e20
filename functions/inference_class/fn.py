"""InferenceClass: a hardware recipe that composes nothing; its status says whether it is usable.

Reads: the InferenceClass (XR). Composes: nothing, so Crossplane's own Ready is always True;
usability is the custom ``Usable`` condition instead. Writes status:

- ``gpu``: true when any device is a GPU (see ``Device.is_gpu``: a ``gpu.<vendor>`` DRA
  driver such as gpu.nvidia.com, or a ``type`` attribute of ``gpu``); InferenceCluster uses
  it to choose a pool's CoreWeave role and whether the NVIDIA DRA driver is installed.
- ``devices``: one line per device kind (name, claim, driver, count, deviceClassName).

A spec the XRD should have refused (for example a DRA device without a deviceClassName) is
defence in depth: ``Usable`` False naming the field, and a Fatal result naming it too.
"""

from __future__ import annotations

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import conditions, xp
from plnt.models import inference_class


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    rsp = xp.respond(req)
    xr = xp.composite(req)

    # inputs
    try:
        spec = inference_class.parse(xr.get("spec"))
    except xp.InvalidInput as err:
        xp.set_conditions(
            rsp, xp.Condition(conditions.USABLE, False, conditions.INVALID_SPEC, str(err))
        )
        xp.fatal(rsp, f"invalid input: {err}")
        return rsp

    # status
    xp.set_status(rsp, {"gpu": spec.has_gpu, "devices": [device_summary(d) for d in spec.devices]})
    xp.set_conditions(rsp, conditions.available(conditions.USABLE, usable_message(spec)))
    return rsp


def device_summary(device: inference_class.Device) -> dict:
    out = {
        "name": device.name,
        "claim": device.claim,
        "driver": device.driver,
        "count": device.count,
    }
    if device.device_class_name:
        out["deviceClassName"] = device.device_class_name
    return out


def usable_message(spec: inference_class.InferenceClassSpec) -> str:
    kinds = ", ".join(f"{d.count}x {d.name}" for d in spec.devices) or "no devices"
    if spec.coreweave is None:
        where = "not provisionable (Existing clusters only)"
    elif spec.has_gpu and not spec.coreweave.accelerator_type:
        where = "not provisionable on CoreWeave until acceleratorType names its GPUs"
    else:
        where = "provisionable on CoreWeave"
    return f"{kinds} per node; {where}"
