"""A WorkflowRun's create sequence, reconcile after reconcile, through the real Crossplane CLI.

Every step is a `crossplane render` (crank) of one pipeline against plnt's function servers on
loopback (the session's `functions_file`): the WorkflowRun's, the ModelDeployment's (schedule,
then canary-gate) and the ModelService's. Each render's XR status is fed back as that XR's
observed status in the next render, and what it composed as the parent's observed resources,
as Crossplane would between reconciles. The canary gate's smoke test runs in its function
server's process between renders, which is what makes it span reconciles.

What a real component would write and cannot here is simulated, and only that:
- the ModelReplicas' status (Ready, WorkloadsReady) that function-model-replica derives from
  workloads on a GPU cluster this machine does not have;
- the engine behind each canary ModelEndpoint: `plnt.gate.fake_server` on loopback (the
  observed endpoint's URL is pointed at it), answering streaming chat completions;
- the control-plane Gateway's address in the ModelService's required resources, and its
  HTTPRoute being Accepted.

The phases the WorkflowRun reports must be the seed's create sequence, with SmokeTesting
between Deploying and Promoting, the first revision taking no traffic until it passed, and the
smoke test sent exactly once.
"""

from __future__ import annotations

import copy
import pathlib
import time
import uuid
from typing import Any

import yaml

from plnt import xp
from plnt.gate.fake_server import Behaviour
from plnt_host import render
from tests.conformance import crossplane_cli
from tests.support import serve_in_thread

REPO = crossplane_cli.REPO
COMPOSITIONS = REPO / "compositions"
FLEET = render.load_folder(REPO / "examples" / "fleet")
UID = "6f1c2a4e-8d1b-4c55-9b7e-2f0a3c9d7e11"
PROMPTS = 3
# far above what a loopback answer takes, so the verdict never depends on the machine's load
BUDGETS = {"prompts": PROMPTS, "ttftBudgetMs": 5000, "tpotBudgetMs": 1000}
GATEWAY = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "Gateway",
    "metadata": {"name": "plnt-gateway", "namespace": "plnt-system"},
    "spec": {"gatewayClassName": "istio", "listeners": []},
    "status": {"addresses": [{"type": "IPAddress", "value": "198.51.100.7"}]},
}
ACCEPTED = {
    "parents": [
        {
            "parentRef": {"name": "plnt-gateway", "namespace": "plnt-system"},
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}],
        }
    ]
}
ENDPOINT = "llama-3-1-70b-instruct.default.svc.cluster.local:8000"


class Renderer:
    """`crossplane render` of one XR, its observed and required resources, from a temp dir."""

    def __init__(self, crank: pathlib.Path, functions_file: pathlib.Path, tmp: pathlib.Path):
        self.crank, self.functions_file, self.tmp = crank, functions_file, tmp
        self.calls = 0

    def __call__(
        self,
        composition: str,
        xr: dict[str, Any],
        observed: list[dict[str, Any]] = (),
        required: list[dict[str, Any]] = (),
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        self.calls += 1
        step = self.tmp / f"{self.calls:03d}"
        step.mkdir()
        (step / "xr.yaml").write_text(render.dump([xr]))
        args = ["render", str(step / "xr.yaml"), str(COMPOSITIONS / composition)]
        args.append(str(self.functions_file))
        for flag, docs in (("--observed-resources", observed), ("--required-resources", required)):
            if docs:
                path = step / f"{flag.strip('-')}.yaml"
                path.write_text(render.dump(list(docs)))
                args += [flag, str(path)]
        proc = crossplane_cli.run(self.crank, *args)
        assert proc.returncode == 0, f"crossplane render failed:\n{proc.stderr}"
        out, *composed = [d for d in yaml.safe_load_all(proc.stdout) if d]
        by_name = {o["metadata"]["annotations"][xp.COMPOSITION_RESOURCE_NAME]: o for o in composed}
        return out, by_name


def observed(obj: dict[str, Any], status: dict[str, Any] | None) -> dict[str, Any]:
    """A composed resource as the next reconcile observes it: applied, with `status`."""
    out = copy.deepcopy(obj)
    out["metadata"].pop("ownerReferences", None)
    if status is not None:
        out["status"] = copy.deepcopy(status)
    return out


def as_xr(composed: dict[str, Any], uid: str, status: dict[str, Any]) -> dict[str, Any]:
    """A composed XR as its own composition sees it: its spec, its uid, its last status."""
    out = observed(composed, status)
    out["metadata"]["uid"] = uid
    return out


def replica_status(ready: bool, reason: str) -> dict[str, Any]:
    """What function-model-replica reports for a replica (simulated: no GPU cluster here)."""
    return {
        "conditions": [
            {"type": "Ready", "status": str(ready), "reason": "Available" if ready else "Creating"},
            {"type": "WorkloadsReady", "status": str(ready), "reason": reason},
        ]
    }


def condition(xr: dict[str, Any], typ: str) -> dict[str, Any]:
    return next((c for c in xr["status"].get("conditions") or [] if c["type"] == typ), {})


class ControlPlane:
    """One WorkflowRun and what it composes, reconciled one pipeline at a time."""

    def __init__(self, crossplane: Renderer, run_xr: dict[str, Any]) -> None:
        self.render = crossplane
        self.run_xr = run_xr
        self.md_uid = str(uuid.uuid4())  # the gate's measurements are per XR: this test's own
        self.ms_uid = str(uuid.uuid4())
        self.run_status: dict[str, Any] = {}
        self.md_status: dict[str, Any] = {}
        self.ms_status: dict[str, Any] | None = None
        self.ms_composed: dict[str, dict[str, Any]] = {}
        self.run_composed: dict[str, dict[str, Any]] = {}
        self.md_composed: dict[str, dict[str, Any]] = {}
        self.phases: list[str] = []

    def workflow_run(self) -> dict[str, Any]:
        seen = []
        if self.md_status:
            seen.append(observed(self.run_composed["model-deployment"], self.md_status))
        if self.ms_status is not None:
            seen.append(observed(self.run_composed["model-service"], self.ms_status))
        # the WorkflowRun as it reads back: its spec, and the status the last reconcile wrote
        xr = {**self.run_xr, "status": self.run_status} if self.run_status else self.run_xr
        out, self.run_composed = self.render("workflowruns.yaml", xr, seen, FLEET)
        self.run_status = out["status"]
        if not self.phases or self.phases[-1] != self.run_status["phase"]:
            self.phases.append(self.run_status["phase"])
        return self.run_status

    def deployment(self, replicas: dict[str, Any] | None, engines: dict[str, str]) -> None:
        """The ModelDeployment's pipeline. `replicas` is the simulated status of every
        ModelReplica (None: none observed yet); `engines` maps a revision to the URL of the
        engine its endpoints reach."""
        seen = []
        for obj in self.md_composed.values():
            if replicas is None:
                continue
            if obj["kind"] == "ModelReplica":
                seen.append(observed(obj, replicas))
            elif obj["kind"] == "ModelEndpoint":
                endpoint = observed(obj, {})
                revision = endpoint["metadata"]["labels"]["modelplane.ai/revision"]
                endpoint["spec"]["url"] = engines.get(revision, endpoint["spec"]["url"])
                seen.append(endpoint)
        xr = as_xr(self.run_composed["model-deployment"], self.md_uid, self.md_status)
        out, self.md_composed = self.render("modeldeployments.yaml", xr, seen, FLEET)
        self.md_status = out["status"]

    def service(self) -> dict[str, Any]:
        """The ModelService's pipeline over the deployment's endpoints; what it composed last
        is observed (its HTTPRoutes taken as Accepted by the Gateway, simulated), so it is
        Ready and, from its second reconcile, reports its in-cluster endpoint."""
        xr = as_xr(self.run_composed["model-service"], self.ms_uid, self.ms_status or {})
        endpoints = [
            observed(o, {}) for o in self.md_composed.values() if o["kind"] == "ModelEndpoint"
        ]
        md = as_xr(self.run_composed["model-deployment"], self.md_uid, self.md_status)
        seen = [
            observed(o, ACCEPTED if o["kind"] == "HTTPRoute" else None)
            for o in self.ms_composed.values()
        ]
        out, self.ms_composed = self.render(
            "modelservices.yaml", xr, seen, [*endpoints, md, GATEWAY]
        )
        self.ms_status = copy.deepcopy(out["status"])
        ready = {"type": "Ready", "status": "True", "reason": "Available"}
        others = [c for c in self.ms_status["conditions"] if c["type"] != "Ready"]
        self.ms_status["conditions"] = [*others, ready]
        return out

    def until_verdict(self, replicas: dict[str, Any], engines: dict[str, str]) -> dict[str, Any]:
        """Reconciles the deployment, as the gate's response TTL makes Crossplane do, until
        the verdict lands: bounded in count and time."""
        for _ in range(60):
            self.deployment(replicas, engines)
            gate = self.md_status["canary"]["gate"]
            if "verdict" in gate:
                return gate
            assert gate["state"] == "Measuring", gate
            time.sleep(0.25)
        raise AssertionError("no verdict after 60 reconciles")


READY = replica_status(True, "Available")


def seed_run() -> dict[str, Any]:
    run_xr = yaml.safe_load((REPO / "examples/workflowrun-llama-70b/xr.yaml").read_text())
    run_xr["metadata"].update(uid=UID, generation=1)
    run_xr["spec"]["canary"]["smokeTest"] = dict(BUDGETS)
    return run_xr


def create(plane: ControlPlane, engine_url: str) -> str:
    """Drives a new WorkflowRun to Ready; returns its first revision."""
    plane.workflow_run()  # Validating: nothing is observed yet
    plane.deployment(None, {})  # the first revision is placed: under test, no traffic
    revision = plane.md_status["revisions"]["canary"]
    engines = {revision: engine_url}
    plane.workflow_run()  # PullingWeights: placed, its weights stage first
    plane.deployment(replica_status(False, "PullingWeights"), engines)
    plane.workflow_run()  # PullingWeights
    plane.deployment(replica_status(False, "Starting"), engines)
    plane.workflow_run()  # Deploying
    plane.deployment(READY, engines)
    plane.workflow_run()  # SmokeTesting
    plane.service()
    assert plane.until_verdict(READY, engines)["verdict"] == "Pass"
    plane.deployment(READY, engines)  # promoted
    plane.workflow_run()  # Promoting
    plane.service()
    plane.workflow_run()  # Ready
    return revision


def test_the_create_sequence_shows_every_phase_and_smoke_tests_once(
    crank: pathlib.Path, functions_file: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    plane = ControlPlane(Renderer(crank, functions_file, tmp_path), seed_run())
    with serve_in_thread(Behaviour(ttft_ms=0, tpot_ms=0, tokens=8)) as engine:
        status = plane.workflow_run()
        assert status["phase"] == "Validating"
        assert (
            plane.run_composed["model-deployment"]["spec"]["canary"]["runId"]
            == (status["workflowRunId"])
        )
        plane.deployment(None, {})
        revision = plane.md_status["revisions"]["canary"]
        engines = {revision: engine.url}
        assert plane.md_status["revisions"] == {"canary": revision}  # no stable: no traffic
        assert plane.md_status["canary"]["trafficPercent"] == 0
        # placed, not started: the weights stage first
        assert plane.workflow_run()["phase"] == "PullingWeights"
        plane.deployment(replica_status(False, "PullingWeights"), engines)
        assert plane.md_status["canary"]["readiness"] == "PullingWeights"
        assert plane.workflow_run()["phase"] == "PullingWeights"
        plane.deployment(replica_status(False, "Starting"), engines)
        assert plane.md_status["canary"]["readiness"] == "Starting"
        assert plane.workflow_run()["phase"] == "Deploying"
        plane.deployment(READY, engines)
        assert plane.md_status["canary"]["gate"]["state"] == "Measuring"
        status = plane.workflow_run()
        assert status["phase"] == "SmokeTesting"  # the measurement runs between reconciles
        assert "endpoint" not in status  # it takes no traffic while it is tested

        routed = condition(plane.service(), "Routed")  # held: no stable revision yet
        assert routed["status"] == "False"
        assert "wait for the latency gate" in routed["message"]

        assert plane.until_verdict(READY, engines)["verdict"] == "Pass"
        assert plane.workflow_run()["phase"] == "SmokeTesting"  # the verdict is acted on next
        plane.deployment(READY, engines)
        assert plane.md_status["revisions"] == {"stable": revision}
        assert condition({"status": plane.md_status}, "Canary")["reason"] == "Promoted"
        assert plane.workflow_run()["phase"] == "Promoting"  # not routed to it yet
        assert condition(plane.service(), "Routed")["status"] == "True"
        plane.deployment(READY, engines)
        status = plane.workflow_run()
        measured = len(engine.requests)

    assert plane.phases == [
        "Validating",
        "PullingWeights",
        "Deploying",
        "SmokeTesting",
        "Promoting",
        "Ready",
    ]
    assert measured == PROMPTS  # measured once, never again
    assert status["url"] == plane.ms_status["url"]
    assert status["endpoint"] == plane.ms_status["endpoint"] == ENDPOINT
    assert condition({"status": status}, "Serving")["status"] == "True"


def test_updates_are_fresh_runs_a_failing_canary_rolls_back_and_unchanged_pods_are_retested(
    crank: pathlib.Path, functions_file: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    plane = ControlPlane(Renderer(crank, functions_file, tmp_path), seed_run())
    with (
        serve_in_thread(Behaviour(ttft_ms=0, tpot_ms=0, tokens=8)) as fast,
        serve_in_thread(Behaviour(ttft_ms=300, tpot_ms=0, tokens=4)) as slow,
    ):
        stable = create(plane, fast.url)
        assert plane.phases[-1] == "Ready"
        endpoint = plane.run_status["endpoint"]
        assert endpoint == ENDPOINT

        # update 1: a change of the pods, a canary at 5% that misses a tightened budget
        plane.phases.clear()
        plane.run_xr["metadata"]["generation"] = 2
        plane.run_xr["spec"]["model"]["quantization"] = "fp8"
        plane.run_xr["spec"]["canary"]["smokeTest"]["ttftBudgetMs"] = 100
        assert plane.workflow_run()["endpoint"] == endpoint  # Validating, still serving
        plane.deployment(READY, {stable: fast.url})
        canary = plane.md_status["revisions"]["canary"]
        assert plane.md_status["revisions"] == {"stable": stable, "canary": canary}
        assert plane.md_status["canary"]["trafficPercent"] == 5
        engines = {stable: fast.url, canary: slow.url}
        # the canary's replicas are placed, not observed yet: its weights stage first
        assert plane.workflow_run()["phase"] == "PullingWeights"
        plane.deployment(READY, engines)
        assert plane.md_status["canary"]["gate"]["state"] == "Measuring"
        # measured already: Deploying is written on the way, and the next step asked for at once
        assert plane.workflow_run()["phase"] == "Deploying"
        assert plane.workflow_run()["phase"] == "SmokeTesting"
        gate = plane.until_verdict(READY, engines)
        assert (gate["verdict"], gate["revision"]) == ("Fail", canary)
        plane.deployment(READY, engines)  # rolled back
        status = plane.workflow_run()
        assert (status["phase"], status["endpoint"]) == ("RolledBack", endpoint)
        assert "(budget 100 ms)" in condition({"status": status}, "Serving")["message"]
        assert plane.phases == [
            "Validating",
            "PullingWeights",
            "Deploying",
            "SmokeTesting",
            "RolledBack",
        ]
        assert len(slow.requests) == PROMPTS

        # update 2: only the budgets change: the serving pods are re-tested in place
        plane.phases.clear()
        plane.run_xr["metadata"]["generation"] = 3
        plane.run_xr["spec"]["model"]["quantization"] = "fp16"
        plane.run_xr["spec"]["canary"]["smokeTest"]["ttftBudgetMs"] = 4000
        plane.workflow_run()
        plane.deployment(READY, {stable: fast.url})
        assert plane.md_status["revisions"] == {"stable": stable, "canary": stable}
        assert plane.md_status["canary"]["trafficPercent"] == 100
        status = plane.workflow_run()
        assert (status["phase"], status["endpoint"]) == ("SmokeTesting", endpoint)
        assert plane.until_verdict(READY, {stable: fast.url})["verdict"] == "Pass"
        plane.deployment(READY, {stable: fast.url})
        plane.service()
        status = plane.workflow_run()
        assert (status["phase"], status["endpoint"]) == ("Ready", endpoint)
        assert plane.phases == ["Validating", "SmokeTesting", "Ready"]
        assert len(fast.requests) == 2 * PROMPTS  # the first rollout, and this run
