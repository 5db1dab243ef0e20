"""gpuClass -> the DRA CEL selector that picks that GPU model, resolved against the fleet.

A WorkflowRun names a GPU the way people do (``nvidia.com/h100``); the fleet scheduler
matches devices by CEL over DRA attributes. Where a class's selector comes from, first match:

1. An InferenceClass device that declares it (``spec.devices[].gpuClass``): the selector picks
   that device's driver and ``productName`` (``device.driver == "gpu.amd.com" &&
   device.attributes["gpu.amd.com"].productName == "AMD Instinct MI300X"``). Several devices
   declaring one class are ORed. This is how a platform team offers a GPU plnt has never
   heard of, with no plnt release.
2. The built-in table below, today's default: NVIDIA's DRA driver publishes each GPU under the
   ``gpu.nvidia.com`` attribute domain with a ``productName`` such as ``NVIDIA H100 80GB
   HBM3``, so each class is a test on that name. docs/workflow-run.md prints it.

Any other class is refused, and the message lists the classes the fleet offers: every declared
class, and every built-in class whose selector picks a GPU device of some InferenceClass
(evaluated with plnt's DRA CEL evaluator). A built-in class the fleet has no GPU for is still
accepted: capacity may come later, and the scheduler's Pending says why nothing is placed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from plnt import cel
from plnt.models.inference_class import GPU_DRIVER_PREFIX
from plnt.xp import InvalidInput

FIELD = "spec.resources.gpuClass"
_PRODUCT = 'device.attributes["gpu.nvidia.com"].productName'

BUILT_IN: dict[str, str] = {
    "nvidia.com/a100": f'{_PRODUCT}.contains("A100")',
    "nvidia.com/h100": f'{_PRODUCT}.contains("H100")',
    "nvidia.com/h200": f'{_PRODUCT}.contains("H200")',
    "nvidia.com/b200": f'{_PRODUCT}.contains("B200")',
    "nvidia.com/l40s": f'{_PRODUCT}.contains("L40S")',
    # "L4" is a prefix of "L40S": match the name's last word instead.
    "nvidia.com/l4": f'{_PRODUCT}.endsWith(" L4")',
    "nvidia.com/rtx-pro-6000": f'{_PRODUCT}.contains("RTX PRO 6000")',
}


@dataclasses.dataclass(frozen=True)
class FleetGpu:
    """One GPU device kind of one InferenceClass, as far as gpuClass resolution reads it."""

    inference_class: str
    device: dict[str, Any]  # driver, attributes: the shape plnt.cel evaluates
    declared: str | None  # the device's gpuClass, if it declares one

    @property
    def selector(self) -> str:
        """CEL that picks this device kind: its driver and, if it has one, its productName."""
        driver = self.device["driver"]
        clauses = [f"device.driver == {json.dumps(driver)}"]
        product = (self.device["attributes"].get("productName") or {}).get("string")
        if product:
            clauses.append(
                f"device.attributes[{json.dumps(driver)}].productName == {json.dumps(product)}"
            )
        return " && ".join(clauses)


def fleet_gpus(inference_classes: Iterable[Mapping[str, Any]]) -> list[FleetGpu]:
    """The GPU device kinds of the fleet's InferenceClasses, read defensively (anything that
    is not a well-formed GPU device is skipped: the InferenceClass function reports it)."""
    out = []
    for obj in inference_classes:
        name = str((obj.get("metadata") or {}).get("name") or "")
        for device in (obj.get("spec") or {}).get("devices") or []:
            gpu = _gpu(name, device)
            if gpu is not None:
                out.append(gpu)
    return sorted(out, key=lambda g: (g.inference_class, g.selector))


def _gpu(inference_class: str, device: Any) -> FleetGpu | None:
    if not isinstance(device, Mapping):
        return None
    driver = device.get("driver")
    attributes = device.get("attributes")
    attributes = attributes if isinstance(attributes, Mapping) else {}
    kind = attributes.get("type")
    is_gpu = isinstance(driver, str) and (
        driver.startswith(GPU_DRIVER_PREFIX)
        or (isinstance(kind, Mapping) and str(kind.get("string", "")).lower() == "gpu")
    )
    if not is_gpu or not driver:
        return None
    strings = {
        k: {"string": v["string"]}
        for k, v in attributes.items()
        if isinstance(v, Mapping) and isinstance(v.get("string"), str)
    }
    declared = device.get("gpuClass")
    return FleetGpu(
        inference_class=inference_class,
        device={"name": str(device.get("name") or ""), "driver": driver, "attributes": strings},
        declared=declared if isinstance(declared, str) and declared else None,
    )


def declared(gpus: Iterable[FleetGpu]) -> dict[str, str]:
    """Declared class -> selector (an OR over the device kinds that declare it)."""
    by_class: dict[str, set[str]] = {}
    for gpu in gpus:
        if gpu.declared:
            by_class.setdefault(gpu.declared, set()).add(gpu.selector)
    return {name: _any_of(sorted(selectors)) for name, selectors in sorted(by_class.items())}


def _any_of(selectors: list[str]) -> str:
    return selectors[0] if len(selectors) == 1 else " || ".join(f"({s})" for s in selectors)


def offered(gpus: list[FleetGpu]) -> list[str]:
    """Every class the fleet has a GPU for: declared ones and built-in ones that match."""
    names = set(declared(gpus))
    for name, expression in BUILT_IN.items():
        if any(_matches(expression, gpu.device) for gpu in gpus):
            names.add(name)
    return sorted(names)


def _matches(expression: str, device: dict[str, Any]) -> bool:
    try:
        return cel.evaluate(expression, device)
    except cel.CelError:
        return False


def selector_for(gpu_class: str, gpus: list[FleetGpu]) -> str:
    """The CEL selector for `gpu_class`, or InvalidInput listing what the fleet offers."""
    found = declared(gpus).get(gpu_class) or BUILT_IN.get(gpu_class)
    if found:
        return found
    offers = offered(gpus)
    listing = ", ".join(offers) if offers else "none (no InferenceClass has a GPU device)"
    raise InvalidInput(
        FIELD,
        f"unknown gpuClass {gpu_class!r}: the fleet offers {listing}; a platform team offers "
        "another by setting gpuClass on an InferenceClass device",
    )
