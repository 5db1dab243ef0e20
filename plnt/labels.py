"""Label and annotation keys plnt puts on what it composes: the one place they are spelled."""

DOMAIN = "modelplane.ai"

POOL = f"{DOMAIN}/pool"  # node label: which InferenceCluster node pool a node belongs to
CPU = f"{DOMAIN}/cpu"  # node label and taint on CPU pools
GPU = f"{DOMAIN}/gpu"  # taint on GPU pools
ACCELERATOR = f"{DOMAIN}/accelerator"  # node label: the GPU accelerator type
DEPLOYMENT = f"{DOMAIN}/deployment"
REPLICA = f"{DOMAIN}/replica"
ENGINE = f"{DOMAIN}/engine"
ROLE = f"{DOMAIN}/role"
PHASE = f"{DOMAIN}/phase"
CLUSTER = f"{DOMAIN}/cluster"
REVISION = f"{DOMAIN}/revision"
API = f"{DOMAIN}/api"
INFERENCE_CLUSTER = f"{DOMAIN}/inference-cluster"
WORKFLOW_RUN = "plnt.work/workflowrun"
