"""Label and annotation keys plnt puts on what it composes: the one place they are spelled,
and `value`, the one way a name becomes a label value."""

from plnt import names

DOMAIN = "modelplane.ai"

POOL = f"{DOMAIN}/pool"  # node label: which InferenceCluster node pool a node belongs to
CPU = f"{DOMAIN}/cpu"  # node label and taint on CPU pools
GPU = f"{DOMAIN}/gpu"  # taint on GPU pools
SYSTEM = f"{DOMAIN}/system"  # node label on the untainted System pool
ACCELERATOR = f"{DOMAIN}/accelerator"  # node label: the GPU accelerator type
DEPLOYMENT = f"{DOMAIN}/deployment"
REPLICA = f"{DOMAIN}/replica"
ENGINE = f"{DOMAIN}/engine"
ROLE = f"{DOMAIN}/role"
PHASE = f"{DOMAIN}/phase"
SERVING = f"{DOMAIN}/serving"  # pod label: Standalone and Leader pods, which serve requests
CLUSTER = f"{DOMAIN}/cluster"
REVISION = f"{DOMAIN}/revision"
API = f"{DOMAIN}/api"
INFERENCE_CLUSTER = f"{DOMAIN}/inference-cluster"
WORKFLOW_RUN = "plnt.work/workflowrun"
HEALTH_PATH = "plnt.work/health-path"  # pod template annotation: the engine's readiness path
WEIGHTS_URI = "plnt.work/weights-uri"  # pod template annotation: where weights are staged from
WEIGHTS_PATH = "plnt.work/weights-path"  # pod template annotation: where the engine reads them
WEIGHTS_SECRET = "plnt.work/weights-secret"  # noqa: S105 (annotation: the downloader's Secret)
WORKFLOW_RUN_ID = "plnt.work/workflow-run-id"  # annotation on what a WorkflowRun composes
STABLE_REVISION = "plnt.work/stable-revision"  # annotation: the revision serving traffic
CANARY_REVISION = "plnt.work/canary-revision"  # annotation: the revision under smoke test
# annotation on a WorkflowRun's ModelService: a digest of its deployment's placements and
# cluster health, so the service re-reads its endpoints when a cluster degrades or recovers
ENDPOINTS_DIGEST = "plnt.work/endpoints"

LABEL_VALUE_MAX = 63


def value(name: str) -> str:
    """A label value standing for a Kubernetes name, valid for any legal name (up to 253
    characters): the name itself when it fits in 63, else a prefix and a stable hash of the
    whole. Selectors built with value() match what value() labelled; where the full name must
    be read back, it goes into an annotation beside the label."""
    return name if len(name) <= LABEL_VALUE_MAX else names.dns_label(name)
