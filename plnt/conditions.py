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

# reasons
AVAILABLE = "Available"
WAITING = "Waiting"
MISSING_DEPENDENCY = "MissingDependency"
INVALID_SPEC = "InvalidSpec"


def waiting(typ: str, message: str, reason: str = WAITING) -> Condition:
    return Condition(typ, False, reason, message)


def available(typ: str, message: str = "") -> Condition:
    return Condition(typ, True, AVAILABLE, message)
