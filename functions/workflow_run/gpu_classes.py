"""gpuClass -> the DRA CEL selector that picks that GPU model.

A WorkflowRun names a GPU the way people do (``nvidia.com/h100``); the fleet scheduler
matches devices by CEL over DRA attributes. NVIDIA's DRA driver publishes each GPU under
the ``gpu.nvidia.com`` attribute domain with a ``productName`` such as
``NVIDIA H100 80GB HBM3``, so each class is a test on that name. The table is the
documentation: docs/workflow-run.md prints it, and the XRD's enum lists the same keys.
"""

from __future__ import annotations

from plnt.xp import InvalidInput

_PRODUCT = 'device.attributes["gpu.nvidia.com"].productName'

GPU_CLASSES: dict[str, str] = {
    "nvidia.com/a100": f'{_PRODUCT}.contains("A100")',
    "nvidia.com/h100": f'{_PRODUCT}.contains("H100")',
    "nvidia.com/h200": f'{_PRODUCT}.contains("H200")',
    "nvidia.com/b200": f'{_PRODUCT}.contains("B200")',
    "nvidia.com/l40s": f'{_PRODUCT}.contains("L40S")',
    # "L4" is a prefix of "L40S": match the name's last word instead.
    "nvidia.com/l4": f'{_PRODUCT}.endsWith(" L4")',
    "nvidia.com/rtx-pro-6000": f'{_PRODUCT}.contains("RTX PRO 6000")',
}


def selector_for(gpu_class: str) -> str:
    try:
        return GPU_CLASSES[gpu_class]
    except KeyError:
        known = ", ".join(sorted(GPU_CLASSES))
        raise InvalidInput(
            "spec.resources.gpuClass", f"unknown gpuClass {gpu_class!r} (known: {known})"
        ) from None
