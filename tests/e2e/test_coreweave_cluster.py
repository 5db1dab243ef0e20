"""Scenario 1: seed 004's CoreWeaveCluster applied with kubectl to a live Crossplane.

provider-coreweave cannot run here: the simulator plays it (a VPC's and a CKS Cluster's status,
the Cluster's API server endpoint being a workload kube-apiserver started for it) and CKS's
NodePool controller. The NodePools themselves are created in that API server by the real
provider-kubernetes, through the kubeconfig Secret plnt composed from the CoreWeave token.
"""

from __future__ import annotations

import base64
import json

import yaml

from tests.e2e import live
from tests.e2e.stack import COREWEAVE_TOKEN, REPO

SEED_XR = REPO / "examples" / "coreweave-cluster" / "xr.yaml"
XR_API = "infrastructure.modelplane.ai/v1alpha1"


def _credentials(plane) -> None:
    """The provider-coreweave ClusterProviderConfig `default` and its token Secret."""
    token = base64.b64encode(json.dumps({"token": COREWEAVE_TOKEN}).encode()).decode()
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "platform"}},
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "coreweave-credentials", "namespace": "crossplane-system"},
                    "data": {"credentials": token},
                },
                {
                    "apiVersion": "coreweave.m.crossplane.io/v1beta1",
                    "kind": "ClusterProviderConfig",
                    "metadata": {"name": "default"},
                    "spec": {
                        "credentials": {
                            "source": "Secret",
                            "secretRef": {
                                "namespace": "crossplane-system",
                                "name": "coreweave-credentials",
                                "key": "credentials",
                            },
                        }
                    },
                },
            ]
        ),
    )


def test_seed_coreweave_cluster_provisions_node_pools(plane) -> None:
    seed = yaml.safe_load(SEED_XR.read_text())
    assert seed["metadata"] == {"name": "inference-us-east-04", "namespace": "platform"}
    _credentials(plane)
    plane.kubectl("apply", "-f", str(SEED_XR))

    vpc = live.wait_object(
        plane.mgmt,
        "networking.coreweave.m.crossplane.io/v1alpha1",
        "VPC",
        "inference-us-east-04",
        "platform",
    )
    assert vpc["spec"]["forProvider"]["zone"] == "US-EAST-04A"
    cluster = live.wait_object(
        plane.mgmt,
        "cks.coreweave.m.crossplane.io/v1alpha1",
        "Cluster",
        "inference-us-east-04",
        "platform",
    )
    assert cluster["spec"]["forProvider"]["version"] == "v1.37"

    xr = live.wait_ready(plane.mgmt, XR_API, "CoreWeaveCluster", "inference-us-east-04", "platform")
    assert live.is_true(xr, "Synced")

    # The NodePool is in the CKS cluster's own API server, named as the seed's pool.
    workload = plane.workloads[plane.simulator.cks_clusters[("platform", "inference-us-east-04")]]
    pools = workload.list("compute.coreweave.com/v1alpha1", "NodePool")
    # Beside the seed's GPU pool, the untainted System pool for cluster add-ons.
    by_name = {p["metadata"]["name"]: p["spec"] for p in pools}
    assert sorted(by_name) == ["gpu-rtxp6000", "system"]
    assert not by_name["system"].get("nodeTaints")
    pool = by_name["gpu-rtxp6000"]
    assert pool["instanceType"] == "rtxp6000-8x"
    assert (pool["autoscaling"], pool["targetNodes"], pool["maxNodes"]) == (True, 1, 2)

    # The kubeconfig Secret authenticates with the CoreWeave token and is published in status.
    secrets = xr["status"]["secrets"]
    assert [s["type"] for s in secrets] == ["Kubeconfig"]
    secret = plane.mgmt.get("v1", "Secret", secrets[0]["name"], "platform")
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"][secrets[0]["key"]]))
    assert kubeconfig["users"][0]["user"]["token"] == COREWEAVE_TOKEN
    assert kubeconfig["clusters"][0]["cluster"]["server"] == workload.url
    # ...and never leaks into status or conditions.
    assert COREWEAVE_TOKEN not in json.dumps(xr)

    header, rows = live.table(plane.kubectl("get", "coreweavecluster", "-n", "platform"))
    assert header.count("READY") == 1, header
    assert header.count("SYNCED") == 1, header
    assert rows[0][0] == "inference-us-east-04"
    assert rows[0][header.index("READY")] == "True"
