"""InferenceClass spec: a hardware recipe, one entry per kind of device on a node, in DRA's shape.

The XRD enforces the same rules with CEL; :func:`check` repeats them so that a spec that slips
past admission (or reaches the function through `plnt render`) is still a Fatal that names the
field, never a half-understood class.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field

from plnt import xp
from plnt.models.base import SpecModel

# Drivers whose devices are GPUs: the DRA convention names GPU drivers gpu.<vendor>.
GPU_DRIVER_PREFIX = "gpu."
NVIDIA_GPU_DRIVER = "gpu.nvidia.com"

# A non-empty Kubernetes label value (acceleratorType ends up as one on nodes).
LABEL_VALUE = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A DRA attribute or capacity name: a C identifier, optionally qualified by a domain.
QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z_][A-Za-z0-9_]{0,31}$"
)
SEMVER = re.compile(
    r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)
QUANTITY = re.compile(
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$"
)
# A WorkflowRun gpuClass: <vendor domain>/<model>, e.g. amd.com/mi300x.
GPU_CLASS = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
)


def _checked(pattern: re.Pattern[str]) -> dict[str, Any]:
    """A pattern `check` enforces (fullmatch, naming the rule), stated in the JSON schema."""
    return {"pattern": pattern.pattern}


_Model = SpecModel


class DeviceAttribute(_Model):
    string: str | None = Field(default=None, max_length=64)
    int_: int | None = Field(default=None, alias="int")
    bool_: bool | None = Field(default=None, alias="bool")
    version: str | None = Field(default=None, max_length=64)

    def kinds_set(self) -> list[str]:
        values = {
            "string": self.string,
            "int": self.int_,
            "bool": self.bool_,
            "version": self.version,
        }
        return [k for k, v in values.items() if v is not None]


class DeviceCapacity(_Model):
    value: int | str


class Device(_Model):
    name: str = Field(min_length=1, max_length=63, json_schema_extra=_checked(DNS_LABEL))
    claim: Literal["DRA", "Synthetic"] = "DRA"
    driver: str = Field(min_length=1, max_length=63)
    device_class_name: str | None = Field(
        default=None, alias="deviceClassName", min_length=1, max_length=253
    )
    gpu_class: str | None = Field(
        default=None, alias="gpuClass", max_length=63, json_schema_extra=_checked(GPU_CLASS)
    )
    count: int = Field(default=1, ge=1, le=128)
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict, max_length=32)
    capacity: dict[str, DeviceCapacity] = Field(default_factory=dict, max_length=32)

    @property
    def is_gpu(self) -> bool:
        """A GPU: its driver is a gpu.<vendor> DRA driver, or it says so in its `type` attribute."""
        if self.driver.startswith(GPU_DRIVER_PREFIX):
            return True
        kind = self.attributes.get("type")
        return bool(kind and kind.string and kind.string.lower() == "gpu")


class CoreWeaveProvisioning(_Model):
    instance_type: str = Field(alias="instanceType", min_length=1, max_length=63)
    # becomes the CoreWeaveCluster pool's acceleratorType, a node label value
    accelerator_type: str | None = Field(
        default=None,
        alias="acceleratorType",
        min_length=1,
        max_length=63,
        pattern=LABEL_VALUE,
    )


class Provisioning(_Model):
    provider: Literal["CoreWeave"]
    coreweave: CoreWeaveProvisioning | None = None


class NodeResources(_Model):
    """CPU and memory one node offers engine pods; declared, the scheduler counts them too."""

    cpu: int | str | None = Field(default=None, json_schema_extra=_checked(QUANTITY))
    memory: int | str | None = Field(default=None, json_schema_extra=_checked(QUANTITY))


class InferenceClassSpec(_Model):
    description: str = Field("", max_length=1024)
    devices: list[Device] = Field(default_factory=list, max_length=16)
    node_resources: NodeResources | None = Field(default=None, alias="nodeResources")
    provisioning: Provisioning | None = None

    @property
    def has_gpu(self) -> bool:
        return any(d.is_gpu for d in self.devices)

    @property
    def needs_nvidia_dra_driver(self) -> bool:
        """True when a device is claimed through the NVIDIA DRA driver on the cluster."""
        return any(d.claim == "DRA" and d.driver == NVIDIA_GPU_DRIVER for d in self.devices)

    @property
    def coreweave(self) -> CoreWeaveProvisioning | None:
        if self.provisioning and self.provisioning.provider == "CoreWeave":
            return self.provisioning.coreweave
        return None


def parse(data: object, path: str = "spec") -> InferenceClassSpec:
    """The validated spec; raises xp.InvalidInput naming the first bad field."""
    spec = xp.parse(InferenceClassSpec, data or {}, path)
    check(spec, path)
    return spec


def check(spec: InferenceClassSpec, path: str = "spec") -> None:
    """The rules the XRD's CEL also enforces, each raised with the field it is about."""
    seen: set[str] = set()
    for i, device in enumerate(spec.devices):
        at = f"{path}.devices[{i}]"
        if not DNS_LABEL.fullmatch(device.name) or len(device.name) > 63:
            raise xp.InvalidInput(
                f"{at}.name", "must be a DNS label (lowercase letters, digits, '-')"
            )
        if device.name in seen:
            raise xp.InvalidInput(f"{at}.name", f"duplicate device name {device.name!r}")
        seen.add(device.name)
        _check_device(device, at)
    if spec.node_resources is not None:
        for name in ("cpu", "memory"):
            value = getattr(spec.node_resources, name)
            if isinstance(value, str) and not QUANTITY.fullmatch(value):
                raise xp.InvalidInput(
                    f"{path}.nodeResources.{name}", f"{value!r} is not a Kubernetes quantity"
                )
    if (
        spec.provisioning
        and spec.provisioning.provider == "CoreWeave"
        and not spec.provisioning.coreweave
    ):
        raise xp.InvalidInput(
            f"{path}.provisioning.coreweave", "required when provider is CoreWeave"
        )


def _check_device(device: Device, at: str) -> None:
    """One device's gpuClass, deviceClassName, attributes and capacity."""
    if device.gpu_class is not None and not GPU_CLASS.fullmatch(device.gpu_class):
        raise xp.InvalidInput(
            f"{at}.gpuClass", "must be <vendor domain>/<model>, such as amd.com/mi300x"
        )
    if device.claim == "DRA" and not device.device_class_name:
        raise xp.InvalidInput(f"{at}.deviceClassName", "required when claim is DRA")
    for name, attr in device.attributes.items():
        where = f"{at}.attributes.{name}"
        if not QUALIFIED_NAME.fullmatch(name):
            raise xp.InvalidInput(where, "not a DRA attribute name")
        if len(attr.kinds_set()) != 1:
            raise xp.InvalidInput(where, "set exactly one of string, int, bool, version")
        if attr.version is not None and not SEMVER.fullmatch(attr.version):
            raise xp.InvalidInput(f"{where}.version", "must be a semantic version such as 1.2.3")
    for name, cap in device.capacity.items():
        where = f"{at}.capacity.{name}"
        if not QUALIFIED_NAME.fullmatch(name):
            raise xp.InvalidInput(where, "not a DRA capacity name")
        if isinstance(cap.value, str) and not QUANTITY.fullmatch(cap.value):
            raise xp.InvalidInput(f"{where}.value", f"{cap.value!r} is not a Kubernetes quantity")
