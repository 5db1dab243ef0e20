"""Condition types and reasons shared by more than one function.

Crossplane owns `Ready` (derived from composed resources' readiness), `Synced` and `Healthy`:
functions say *why* something is not ready through the custom types below.
"""

from plnt.xp import Condition

# types
PROVISIONED = "Provisioned"  # infrastructure (CKS cluster, pools) is up
WORKLOADS_READY = "WorkloadsReady"  # every engine's copies are available
REPLICAS_SCHEDULED = "ReplicasScheduled"
REPLICAS_READY = "ReplicasReady"
VALID = "Valid"
CANARY = "Canary"  # a canary revision: awaiting the gate, promoted, rolled back
REACHABLE = "Reachable"  # ModelEndpoint: whether the URL answers (not probed by the function)
ROUTED = "Routed"  # ModelService: the HTTPRoute sends traffic to at least one endpoint
IN_CLUSTER_ENDPOINT = "InClusterEndpoint"  # ModelService: its Service reaches the route
SERVING = "Serving"  # WorkflowRun: its phase, as a condition (True when Ready)
USABLE = "Usable"  # an InferenceClass can be used by clusters and the scheduler
STACK_READY = "StackReady"  # an InferenceCluster's serving stack and gateway are up
CANARY_GATE = "CanaryGate"  # the latency gate's verdict on a canary revision
BOUND = "Bound"  # ModelReplica: the binder committed its capacity (plnt.capacity.binding)
REPLICAS_BOUND = "ReplicasBound"  # ModelDeployment: every replica is bound, none over-committed
# ModelDeployment (and the WorkflowRun, copied): whether the clusters its replicas are on are
# healthy, which are degraded and why, and what fails over where
CLUSTERS_HEALTHY = "ClustersHealthy"

# reasons
AVAILABLE = "Available"
WAITING = "Waiting"
MISSING_DEPENDENCY = "MissingDependency"
INVALID_SPEC = "InvalidSpec"
PULLING_WEIGHTS = "PullingWeights"  # ReplicasReady reason while an init step stages weights
# WorkloadsReady / ReplicasReady reason while the engines' pods exist, their weights (if any)
# staged, and the engines start: not ready yet, nothing left to download
STARTING = "Starting"
# WorkloadsReady / ReplicasReady reason while the kube-scheduler cannot place an engine's pod
UNSCHEDULABLE = "Unschedulable"
# ReplicasScheduled / WorkloadsReady reason: a pod template asks for what plnt does not let onto
# a workload cluster (plnt.pod_policy): an extended resource, a pod annotation not allowed
TEMPLATE_NOT_PERMITTED = "TemplateNotPermitted"
HEALTHY = "Healthy"  # ClustersHealthy
# ClustersHealthy / ReplicasReady reason: replicas are on a cluster that does not answer or is
# not Ready (plnt.cluster_health); their endpoints are out of the routes
CLUSTER_DEGRADED = "ClusterDegraded"
NOT_PROBED = "NotProbed"
NO_ENDPOINTS = "NoEndpoints"
PASSED = "Passed"  # CanaryGate
FAILED = "Failed"  # CanaryGate
MEASURING = "Measuring"  # CanaryGate
WAITING_FOR_CANARY = "WaitingForCanary"  # CanaryGate
NO_CANARY = "NoCanary"  # CanaryGate: no canary revision awaits a verdict
# Canary (ModelDeployment; the WorkflowRun's phase follows them). FAILED as well: the revision
# under test failed and there is nothing to roll back to.
PROMOTED = "Promoted"
ROLLED_BACK = "RolledBack"
AWAITING_VERDICT = "AwaitingVerdict"
STABLE = "Stable"


def waiting(typ: str, message: str, reason: str = WAITING) -> Condition:
    return Condition(typ, False, reason, message)


def available(typ: str, message: str = "") -> Condition:
    return Condition(typ, True, AVAILABLE, message)
