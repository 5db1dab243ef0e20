"""CoreWeaveCluster spec (infrastructure.modelplane.ai/v1alpha1), as its XRD states it.

Every bound, default, enum and pattern of the XRD is repeated here, and the XRD's CEL rules
are the model validators below, so input Crossplane would have refused still fails with the
same field path if it reaches the function (for example through `crossplane render`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from plnt.models.base import SpecModel
from plnt.xp import InvalidInput

POOL_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
KUBERNETES_VERSION_PATTERN = r"^[0-9]+\.[0-9]+$"
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
DEFAULT_KUBERNETES_VERSION = "1.37"
MAX_POOLS = 8
MAX_NODES = 1000
# the untainted CPU pool for cluster add-ons, added when the spec declares no System pool
SYSTEM_POOL_NAME = "system"
SYSTEM_POOL_INSTANCE_TYPE = "cd-gp-a192-genoa"
SYSTEM_POOL_NODES = 2

NodeCount = Annotated[int, Field(ge=0, le=MAX_NODES)]
MaxNodeCount = Annotated[int, Field(ge=1, le=MAX_NODES)]  # an autoscaled pool's ceiling


_Model = SpecModel


class Credentials(_Model):
    name: str = Field("default", min_length=1, max_length=253)
    type: Literal["ProviderConfig", "ClusterProviderConfig"] = "ClusterProviderConfig"


class Gpu(_Model):
    # a node label value on the pool's nodes
    accelerator_type: str = Field(
        alias="acceleratorType", min_length=1, max_length=63, pattern=LABEL_VALUE_PATTERN
    )


class NodePool(_Model):
    name: str = Field(min_length=1, max_length=40, pattern=POOL_NAME_PATTERN)
    role: Literal["GPU", "CPU", "System"]
    instance_type: str = Field(alias="instanceType", min_length=1, max_length=63)
    gpu: Gpu | None = None
    node_count: NodeCount = Field(1, alias="nodeCount")
    min_node_count: NodeCount | None = Field(None, alias="minNodeCount")
    max_node_count: MaxNodeCount | None = Field(None, alias="maxNodeCount")

    @property
    def autoscaled(self) -> bool:
        return self.max_node_count is not None


class CoreWeaveClusterSpec(_Model):
    credentials: Credentials = Field(default_factory=Credentials)
    kubernetes_version: str = Field(
        DEFAULT_KUBERNETES_VERSION,
        alias="kubernetesVersion",
        pattern=KUBERNETES_VERSION_PATTERN,
    )
    zone: str = Field(min_length=1, max_length=32)
    node_pools: list[NodePool] = Field(alias="nodePools", min_length=1, max_length=MAX_POOLS)

    @model_validator(mode="after")
    def _cross_field_rules(self) -> CoreWeaveClusterSpec:
        """The XRD's x-kubernetes-validations, raised with the path of the offending field."""
        seen: set[str] = set()
        for i, pool in enumerate(self.node_pools):
            at = f"spec.nodePools[{i}]"
            if pool.role == "GPU" and pool.gpu is None:
                raise InvalidInput(f"{at}.gpu", "gpu is required when role is GPU")
            if pool.min_node_count is not None and pool.max_node_count is None:
                raise InvalidInput(f"{at}.minNodeCount", "minNodeCount requires maxNodeCount")
            if pool.max_node_count is not None:
                if pool.min_node_count is not None and pool.min_node_count > pool.max_node_count:
                    raise InvalidInput(
                        f"{at}.minNodeCount", "minNodeCount must not exceed maxNodeCount"
                    )
                if pool.node_count > pool.max_node_count:
                    raise InvalidInput(
                        f"{at}.nodeCount",
                        "nodeCount (the initial count of an autoscaled pool) must not exceed "
                        "maxNodeCount",
                    )
            if pool.name in seen:
                raise InvalidInput(f"{at}.name", f"node pool names must be unique: {pool.name!r}")
            seen.add(pool.name)
        for i, pool in enumerate(self.node_pools):
            if pool.name == SYSTEM_POOL_NAME and self.system_pool() is not None:
                raise InvalidInput(
                    f"spec.nodePools[{i}].name",
                    f"{SYSTEM_POOL_NAME!r} names the default System pool: give this pool role "
                    "System to replace it, or another name",
                )
        return self

    def system_pool(self) -> NodePool | None:
        """The default System pool, unless the spec declares a pool of role System."""
        if any(pool.role == "System" for pool in self.node_pools):
            return None
        return NodePool.model_validate(
            {
                "name": SYSTEM_POOL_NAME,
                "role": "System",
                "instanceType": SYSTEM_POOL_INSTANCE_TYPE,
                "nodeCount": SYSTEM_POOL_NODES,
            }
        )

    def pools(self) -> list[NodePool]:
        """Every pool the cluster gets: the declared ones and the default System pool."""
        system = self.system_pool()
        return [*self.node_pools, *([system] if system else [])]
