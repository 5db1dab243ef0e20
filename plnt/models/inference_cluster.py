"""InferenceCluster spec: where a cluster comes from, and its node pools by InferenceClass.

Bounds follow CoreWeaveCluster's pools (names 1-40 chars, DNS labels; counts 0-1000). The
XRD's CEL rules are repeated in :func:`check`, each raised with the field it is about.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from plnt import xp
from plnt.models.base import SpecModel

# A CoreWeave source composes a CoreWeaveCluster: its pools, credentials and versions are that
# kind's.
from plnt.models.coreweave_cluster import (
    DEFAULT_KUBERNETES_VERSION,
    KUBERNETES_VERSION_PATTERN,
    POOL_NAME_PATTERN,
    Credentials,
    MaxNodeCount,
    NodeCount,
)
from plnt.models.coreweave_cluster import MAX_POOLS as MAX_COREWEAVE_POOLS
from plnt.models.model_deployment import ClusterSelector

DEFAULT_NAMESPACE = "plnt-system"
MAX_POOLS = 32
MAX_NAME = 40  # the name prefixes composed objects' names and is a label value


_Model = SpecModel


class CoreWeaveSource(_Model):
    zone: str = Field(min_length=1, max_length=32)
    kubernetes_version: str = Field(
        DEFAULT_KUBERNETES_VERSION,
        alias="kubernetesVersion",
        max_length=16,
        pattern=KUBERNETES_VERSION_PATTERN,
    )
    credentials: Credentials = Field(default_factory=Credentials)
    namespace: str = Field(
        DEFAULT_NAMESPACE, min_length=1, max_length=63, pattern=POOL_NAME_PATTERN
    )


class SecretKeyRef(_Model):
    name: str = Field(min_length=1, max_length=253)
    namespace: str = Field(min_length=1, max_length=63)
    key: str = Field("kubeconfig", min_length=1, max_length=253)


class ExistingSource(_Model):
    secret_ref: SecretKeyRef = Field(alias="secretRef")


class ClusterSource(_Model):
    source: Literal["CoreWeave", "Existing"]
    coreweave: CoreWeaveSource | None = None
    existing: ExistingSource | None = None


class NodePool(_Model):
    name: str = Field(min_length=1, max_length=40, pattern=POOL_NAME_PATTERN)
    class_name: str = Field(alias="className", min_length=1, max_length=253)
    node_count: NodeCount = Field(1, alias="nodeCount")
    min_node_count: NodeCount | None = Field(None, alias="minNodeCount")
    max_node_count: MaxNodeCount | None = Field(None, alias="maxNodeCount")

    @property
    def node_capacity(self) -> int:
        """Nodes the scheduler may count on: the autoscaling ceiling, else the fixed size."""
        return self.max_node_count if self.max_node_count is not None else self.node_count


class InferenceClusterSpec(_Model):
    cluster: ClusterSource
    node_pools: list[NodePool] = Field(alias="nodePools", min_length=1, max_length=MAX_POOLS)
    namespace_selector: ClusterSelector | None = Field(default=None, alias="namespaceSelector")


def parse(data: object, path: str = "spec") -> InferenceClusterSpec:
    """The validated spec; raises xp.InvalidInput naming the first bad field."""
    spec = xp.parse(InferenceClusterSpec, data or {}, path)
    check(spec, path)
    return spec


def check_name(name: str) -> None:
    """The XR's name names what it composes (and is a label value), so it is kept short."""
    if len(name) > MAX_NAME:
        raise xp.InvalidInput(
            "metadata.name",
            f"must be at most {MAX_NAME} characters: it names the CoreWeaveCluster, the "
            "ProviderConfigs and the Releases, and labels what they compose",
        )


def check(spec: InferenceClusterSpec, path: str = "spec") -> None:
    """The rules the XRD's CEL also enforces, each raised with the field it is about."""
    cluster = spec.cluster
    own, other = (
        ("coreweave", "existing") if cluster.source == "CoreWeave" else ("existing", "coreweave")
    )
    if getattr(cluster, own) is None:
        raise xp.InvalidInput(f"{path}.cluster.{own}", f"required when source is {cluster.source}")
    if getattr(cluster, other) is not None:
        raise xp.InvalidInput(
            f"{path}.cluster.{other}", f"must not be set when source is {cluster.source}"
        )
    if cluster.source == "CoreWeave" and len(spec.node_pools) > MAX_COREWEAVE_POOLS:
        raise xp.InvalidInput(
            f"{path}.nodePools",
            f"at most {MAX_COREWEAVE_POOLS} node pools when source is CoreWeave",
        )
    seen: set[str] = set()
    for i, pool in enumerate(spec.node_pools):
        at = f"{path}.nodePools[{i}]"
        if pool.name in seen:
            raise xp.InvalidInput(f"{at}.name", f"duplicate node pool name {pool.name!r}")
        seen.add(pool.name)
        if pool.min_node_count is not None and pool.max_node_count is None:
            raise xp.InvalidInput(f"{at}.minNodeCount", "minNodeCount requires maxNodeCount")
        if pool.max_node_count is None:
            continue
        if pool.min_node_count is not None and pool.min_node_count > pool.max_node_count:
            raise xp.InvalidInput(f"{at}.minNodeCount", "minNodeCount must not exceed maxNodeCount")
        if pool.node_count > pool.max_node_count:
            raise xp.InvalidInput(f"{at}.nodeCount", "nodeCount must not exceed maxNodeCount")
