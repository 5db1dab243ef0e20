"""Benchmark: what one ModelDeployment reconcile carries at fleet scale, side by side.

The fleet: `clusters` InferenceClusters of 8 pools (the scheduler benchmark's clusters, three GPU
classes), one region label per 100 clusters; as many ModelDeployments as clusters, each of 10
one-GPU replicas in its own region, so ten replicas per cluster and 100,000 at 10,000 clusters.
Every replica is bound (`commit.bind_all`, the binder's own decision), as on a fleet at rest.

Two designs answer the same reconciles:
- whole fleet (what the view replaces): the function requires every InferenceCluster and every
  ModelReplica, so each request grows with clusters + replicas and a resync of all deployments
  with deployments x (clusters + replicas);
- fleet view: the function requires the view's index and the parts whose labels its
  clusterSelector's matchLabels select, written by the binder once per pass, and by name the
  clusters it places new replicas on (their fences, as the binder reads them).

Reconciles measured, each in both designs with identical placements required:
- `regional`: a deployment at rest (its 10 replicas observed and bound), the resync case;
- `new-regional`: a new deployment of 10 one-GPU replicas in a loaded region;
- `new-fleet-wide`: the scheduler benchmark's deployment (8-GPU replicas, two CEL selectors)
  selecting every cluster, the largest view a request can carry.
Objects carry the metadata an API server adds (uid, resourceVersion, timestamps, one
managedFields entry mirroring the object's fields), so request sizes are those Crossplane sends.

The resync rows give, per fleet size, one resync of every deployment: requests x bytes and
CPU (measured on a sample of reconciles, every deployment being alike), plus, for the view, the
binder's pass writing it.

    python -m plnt_host.bench.fleet          # prints one JSON object
"""

from __future__ import annotations

import copy
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from plnt import xp
from plnt.capacity import binding, commit, fleet_view
from plnt_host import render
from plnt_host.bench import scheduler as bench_scheduler

SIZES = (1000, 2500, 5000, 10000)
POOLS = 8
REPLICAS_PER_DEPLOYMENT = 10
CLUSTERS_PER_REGION = 100
REGION_LABEL = "plnt.work/region"
MAX_BYTES = 4 * 1024 * 1024  # gRPC's default message limit, which Crossplane's client keeps
TARGET_CPU_S = 0.5
SAMPLES = 3  # reconciles measured per design and size for the resync totals


def region(index: int) -> str:
    return f"region-{index // CLUSTERS_PER_REGION:03d}"


def _fields_v1(value: Any) -> Any:
    if isinstance(value, dict):
        return {f"f:{k}": _fields_v1(v) for k, v in value.items()}
    return {}


def served(obj: dict[str, Any], uid: int, manager: str = "plnt") -> dict[str, Any]:
    """`obj` as an API server returns it: uid, resourceVersion, timestamps, managedFields."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    meta.update(
        uid=f"00000000-0000-4000-8000-{uid:012d}",
        resourceVersion=str(100000 + uid),
        generation=1,
        creationTimestamp="2026-12-01T00:00:00Z",
    )
    fields = {k: v for k, v in out.items() if k not in ("apiVersion", "kind")}
    meta["managedFields"] = [
        {
            "apiVersion": out.get("apiVersion", "v1"),
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields_v1({k: v for k, v in fields.items() if k != "metadata"})
            | {
                "f:metadata": _fields_v1(
                    {k: meta[k] for k in ("labels", "annotations") if k in meta}
                )
            },
            "manager": manager,
            "operation": "Update",
            "time": "2026-12-01T00:00:00Z",
        }
    ]
    return out


def cluster(index: int) -> dict[str, Any]:
    obj = bench_scheduler.inference_cluster(index, POOLS)
    obj["metadata"]["name"] = f"cluster-{index:05d}"
    obj["metadata"]["labels"][REGION_LABEL] = region(index)
    obj["metadata"]["labels"]["crossplane.io/composite"] = obj["metadata"]["name"]  # as Crossplane
    return obj


def regional_deployment(index: int, replicas: int = REPLICAS_PER_DEPLOYMENT) -> dict[str, Any]:
    """Deployment `index`: `replicas` one-GPU replicas in region index // 100's clusters (the
    scheduler benchmark's deployment with one GPU a replica and no CEL selectors)."""
    md = bench_scheduler.deployment(replicas)
    md["metadata"] = {"name": f"md-{index:05d}", "namespace": f"team-{index % 100:02d}"}
    md["spec"]["clusterSelector"]["matchLabels"][REGION_LABEL] = region(index)
    member = md["spec"]["engines"][0]["members"][0]
    member["nodeSelector"] = {"devices": [{"name": "gpu", "count": 1}]}
    member["template"]["spec"]["containers"][0]["args"] = ["--model=Qwen/Qwen3-8B"]
    return md


def _template_replica() -> dict[str, Any]:
    """One replica of a regional deployment as the function composes it (on an empty cluster)."""
    from functions.model_deployment import fn

    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.CopyFrom(
        bench_scheduler.struct(regional_deployment(0, replicas=1))
    )
    answers = {
        "fleet-view-index": [],
        "fleet-view": [],
        "inference-clusters": [cluster(0)],
        "inference-classes": classes(),
        "model-replicas": [],
        "namespace": [],
        "quota-ledgers": [],
    }
    for name, objs in answers.items():
        req.required_resources[name].items.extend(
            fnv1.Resource(resource=bench_scheduler.struct(o)) for o in objs
        )
    rsp = fn.run_function(req)
    (replica,) = [
        xp.to_dict(r.resource) for n, r in rsp.desired.resources.items() if n.startswith("replica-")
    ]
    return replica


def classes() -> list[dict[str, Any]]:
    return [bench_scheduler.inference_class(n) for n in sorted(bench_scheduler.GPUS)]


class Fleet:
    """A bound fleet of `size` clusters and `size` regional deployments, and its view."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.clusters = {c["metadata"]["name"]: c for c in (cluster(i) for i in range(size))}
        self.classes = {c["metadata"]["name"]: c for c in classes()}
        template = _template_replica()
        template_pool = template["spec"]["engines"][0]["members"][0]["nodePoolName"]
        demand = json.loads(template["metadata"]["annotations"][binding.DEMAND])[template_pool]
        replicas = []
        for d in range(size):
            md = regional_deployment(d)
            base = (d // CLUSTERS_PER_REGION) * CLUSTERS_PER_REGION
            for k in range(REPLICAS_PER_DEPLOYMENT):
                n = d * REPLICAS_PER_DEPLOYMENT + k
                target = f"cluster-{base + n % CLUSTERS_PER_REGION:05d}"
                pool = f"pool-{(n // CLUSTERS_PER_REGION) % POOLS}"
                r = copy.deepcopy(template)
                meta = r["metadata"]
                meta["name"] = f"{md['metadata']['name']}-{k}"
                meta["namespace"] = md["metadata"]["namespace"]
                meta["labels"] = {
                    **meta["labels"],
                    "modelplane.ai/deployment": md["metadata"]["name"],
                    "modelplane.ai/cluster": target,
                }
                meta["annotations"] = {binding.DEMAND: json.dumps({pool: demand})}
                meta["uid"] = f"replica-{n}"
                meta["creationTimestamp"] = "2026-12-01T00:00:00Z"
                r["spec"]["clusterName"] = target
                r["spec"]["engines"][0]["members"][0]["nodePoolName"] = pool
                replicas.append(r)
        self.ledgers, self.replicas = commit.bind_all(self.clusters, self.classes, replicas)
        start = time.process_time()
        self.parts = fleet_view.parts(commit.views(self.clusters, self.classes, self.ledgers))
        self.view_cpu_s = time.process_time() - start
        self.configmaps = fleet_view.configmaps(self.parts)
        self.by_deployment: dict[str, list[dict[str, Any]]] = {}
        for r in self.replicas:
            self.by_deployment.setdefault(
                r["metadata"]["labels"]["modelplane.ai/deployment"], []
            ).append(r)

    def pool(self, *, view: bool) -> list[dict[str, Any]]:
        """What the API server holds that a requirement may match, in each design."""
        held = [*self.classes.values(), *self.clusters.values()]
        return held + (self.configmaps if view else self.replicas)

    def unbound(self) -> int:
        return sum(1 for r in self.replicas if binding.state_of(r).state != binding.BOUND)

    def request(
        self, xr: Mapping[str, Any], own: Sequence[Mapping[str, Any]], *, view: bool
    ) -> fnv1.RunFunctionRequest:
        """The request Crossplane sends once every requirement the function declares is answered
        (checked: `check_answered`)."""
        req = fnv1.RunFunctionRequest()
        req.observed.composite.resource.CopyFrom(
            bench_scheduler.struct(served(dict(xr), 0, "kubectl"))
        )
        for i, obj in enumerate(own):
            name = f"replica-{obj['metadata']['name']}"
            req.observed.resources[name].resource.CopyFrom(
                bench_scheduler.struct(served(dict(obj), i + 1, "crossplane"))
            )
        answers: dict[str, list[dict[str, Any]]] = {
            "inference-classes": list(self.classes.values()),
            "namespace": [],  # no fence or quota applies (plnt.capacity.tenant)
            "quota-ledgers": [],
        }
        if view:
            labels = {**xr["spec"]["clusterSelector"]["matchLabels"], fleet_view.VIEW_LABEL: "true"}
            answers["fleet-view-index"] = [
                c for c in self.configmaps if c["metadata"]["name"] == fleet_view.INDEX_NAME
            ]
            answers["fleet-view"] = [
                c
                for c in self.configmaps
                if all((c["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
            ]
        else:
            answers["fleet-view-index"] = []
            answers["fleet-view"] = []
            answers["inference-clusters"] = list(self.clusters.values())
            answers["model-replicas"] = self.replicas
        uid = 1000
        for name, objs in answers.items():
            items = req.required_resources[name].items
            for obj in objs:
                uid += 1
                items.append(fnv1.Resource(resource=bench_scheduler.struct(served(obj, uid))))
        if view:  # the clusters it places on, read by name for their fences, as Crossplane would
            from functions.model_deployment import fn
            from plnt.capacity import reading

            asked = fn.run_function(req).requirements.resources
            for name, sel in sorted(asked.items()):
                if name.startswith(reading.CLUSTER_BY_NAME) and name not in req.required_resources:
                    uid += 1
                    obj = served(self.clusters[sel.match_name], uid)
                    req.required_resources[name].items.append(
                        fnv1.Resource(resource=bench_scheduler.struct(obj))
                    )
        return req


def check_answered(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, pool: Sequence[dict[str, Any]]
) -> None:
    """The response asks for exactly what the request answered, each requirement with as many
    objects as `pool` (what the API server holds) matches: Crossplane would not call again."""
    wanted = dict(rsp.requirements.resources)
    if set(wanted) != set(req.required_resources):
        raise AssertionError(
            f"requirements {sorted(wanted)} != answered {sorted(req.required_resources)}"
        )
    for name, sel in wanted.items():
        matched = len(render.fetch(pool, sel).items)
        if matched != len(req.required_resources[name].items):
            raise AssertionError(
                f"{name}: answered {len(req.required_resources[name].items)}, "
                f"the selector matches {matched}"
            )


def placements(rsp: fnv1.RunFunctionResponse) -> list[tuple[str, str, tuple[str, ...]]]:
    out = []
    for name, r in sorted(rsp.desired.resources.items()):
        if not name.startswith("replica-"):
            continue
        obj = xp.to_dict(r.resource)
        pools = tuple(m["nodePoolName"] for e in obj["spec"]["engines"] for m in e["members"])
        out.append((obj["metadata"]["name"], obj["spec"]["clusterName"], pools))
    return out


def worker(path: str, calls: int) -> dict[str, Any]:
    """In a fresh process set up as a function server's worker (`runtime.tune_gc`): the CPU of
    the first call (fleet view not yet decoded, CEL cold) and the median of the next ones (a
    server resyncing deployments on the same view). Writes the first response beside `path`."""
    from functions.model_deployment import fn
    from plnt_host import runtime

    runtime.tune_gc()
    req = fnv1.RunFunctionRequest.FromString(pathlib.Path(path).read_bytes())
    cpu = []
    for i in range(calls):
        start = time.process_time()
        rsp = fn.run_function(req)
        cpu.append(time.process_time() - start)
        if i == 0:
            pathlib.Path(path + ".rsp").write_bytes(rsp.SerializeToString())
    return {"first_cpu_s": cpu[0], "steady_cpu_s": statistics.median(cpu[1:] or cpu)}


def reconcile(
    req: fnv1.RunFunctionRequest, pool: Sequence[dict[str, Any]], calls: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/request.bin"
        pathlib.Path(path).write_bytes(req.SerializeToString())
        out = subprocess.run(
            [sys.executable, "-m", "plnt_host.bench.fleet", "--worker", path, str(calls)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if out.returncode:
            raise RuntimeError(f"reconcile worker failed: {out.stderr[-2000:]}")
        cpu = json.loads(out.stdout)
        rsp = fnv1.RunFunctionResponse.FromString(pathlib.Path(path + ".rsp").read_bytes())
    check_answered(req, rsp, pool)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    if fatal:
        raise AssertionError(f"fatal: {fatal}")
    return {
        "request_bytes": req.ByteSize(),
        "response_bytes": rsp.ByteSize(),
        **cpu,
        "placements": placements(rsp),
    }


def side_by_side(
    f: Fleet, xr: Mapping[str, Any], own: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """One reconcile of `xr` in both designs: bytes each way, CPU (first call in a fresh worker
    and steady), and whether they place alike."""
    old = reconcile(f.request(xr, own, view=False), f.pool(view=False), calls=2)
    new = reconcile(f.request(xr, own, view=True), f.pool(view=True), calls=5)
    row: dict[str, Any] = {"placed": len(new["placements"])}
    for design, r in (("whole_fleet", old), ("fleet_view", new)):
        row[design] = {
            "request_mib": round(r["request_bytes"] / 2**20, 3),
            "response_mib": round(r["response_bytes"] / 2**20, 4),
            "first_cpu_s": round(r["first_cpu_s"], 4),
            "steady_cpu_s": round(r["steady_cpu_s"], 4),
        }
    row["identical_placements"] = old["placements"] == new["placements"]
    row["within_targets"] = (
        new["request_bytes"] <= MAX_BYTES
        and new["response_bytes"] <= MAX_BYTES
        and new["steady_cpu_s"] <= TARGET_CPU_S  # the median, as the baseline is measured
    )
    row["_bytes"] = {
        "old": old["request_bytes"] + old["response_bytes"],
        "new": new["request_bytes"] + new["response_bytes"],
    }
    row["_cpu"] = {"old": old["steady_cpu_s"], "new": new["steady_cpu_s"]}
    return row


def new_regional(index: int) -> dict[str, Any]:
    """A deployment not yet on the fleet, in deployment `index`'s region."""
    md = regional_deployment(index)
    md["metadata"]["name"] = "md-new"
    return md


def at_rest(f: Fleet, index: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    md = regional_deployment(index)
    return md, f.by_deployment[md["metadata"]["name"]]


def bench(sizes: Sequence[int] = SIZES, samples: int = SAMPLES) -> dict[str, Any]:
    out: dict[str, Any] = {
        "targets": {
            "request_mib": MAX_BYTES / 2**20,
            "response_mib": MAX_BYTES / 2**20,
            "cpu_s": TARGET_CPU_S,
        },
        "resync": [],
    }
    largest = max(sizes)
    for size in sorted(sizes):
        f = Fleet(size)
        if f.unbound():
            raise AssertionError(f"{f.unbound()} replicas did not bind")
        rows = [side_by_side(f, *at_rest(f, (i * 7919) % size)) for i in range(samples)]
        per = {
            design: {
                "bytes": statistics.mean(r["_bytes"][key] for r in rows),
                "cpu_s": statistics.mean(r["_cpu"][key] for r in rows),
            }
            for design, key in (("whole_fleet", "old"), ("fleet_view", "new"))
        }
        view_bytes = sum(len(p.payload) for p in f.parts)
        out["resync"].append(
            {
                "clusters": size,
                "deployments": size,
                "replicas": len(f.replicas),
                "identical_placements": all(r["identical_placements"] for r in rows),
                "whole_fleet": {
                    "total_gib": round(size * per["whole_fleet"]["bytes"] / 2**30, 2),
                    "total_cpu_s": round(size * per["whole_fleet"]["cpu_s"], 1),
                },
                "fleet_view": {
                    "total_gib": round((size * per["fleet_view"]["bytes"] + view_bytes) / 2**30, 4),
                    "total_cpu_s": round(size * per["fleet_view"]["cpu_s"] + f.view_cpu_s, 1),
                    "view_parts": len(f.parts),
                    "view_mib": round(view_bytes / 2**20, 3),
                    "view_json_mib": round(sum(len(p.text) for p in f.parts) / 2**20, 3),
                    "binder_view_cpu_s": round(f.view_cpu_s, 3),
                },
            }
        )
        if size == largest:
            md, own = at_rest(f, size // 2)
            out["reconcile"] = {
                "fleet": {
                    "clusters": size,
                    "pools": size * POOLS,
                    "deployments": size,
                    "replicas": len(f.replicas),
                },
                "regional": side_by_side(f, md, own),
                "new-regional": side_by_side(f, new_regional(size // 2), []),
                "new-fleet-wide": side_by_side(f, bench_scheduler.deployment(100), []),
            }
    first, last = out["resync"][0], out["resync"][-1]
    grow = last["clusters"] / first["clusters"]
    out["growth"] = {
        "fleet": grow,
        "whole_fleet_bytes": round(
            last["whole_fleet"]["total_gib"] / first["whole_fleet"]["total_gib"], 1
        ),
        "fleet_view_bytes": round(
            last["fleet_view"]["total_gib"] / first["fleet_view"]["total_gib"], 1
        ),
        "whole_fleet_cpu": round(
            last["whole_fleet"]["total_cpu_s"] / first["whole_fleet"]["total_cpu_s"], 1
        ),
        "fleet_view_cpu": round(
            last["fleet_view"]["total_cpu_s"] / max(first["fleet_view"]["total_cpu_s"], 1e-9), 1
        ),
    }
    for row in out.get("reconcile", {}).values():
        if isinstance(row, dict):
            row.pop("_bytes", None)
            row.pop("_cpu", None)
    return out


def main(argv: Sequence[str] = ()) -> int:
    if argv[:1] == ["--worker"]:
        print(json.dumps(worker(argv[1], int(argv[2]))))
        return 0
    print(json.dumps(bench(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


def table(out: Mapping[str, Any]) -> str:
    """The figures side by side: each reconcile in both designs against the targets, then one
    resync of every deployment by fleet size, then how each grows with the fleet."""
    lines = []
    rows = out.get("reconcile") or {}
    if rows:
        f = rows["fleet"]
        lines.append(
            f"one reconcile on {f['clusters']:,} clusters x {POOLS} pools, "
            f"{f['deployments']:,} ModelDeployments, {f['replicas']:,} ModelReplicas"
        )
        lines.append(
            f"  {'':16}{'request MiB':>20}{'response MiB':>20}{'CPU s steady':>20}"
            f"{'CPU s first':>20}  placements"
        )
        lines.append(f"  {'':16}" + f"{'whole':>10}{'view':>10}" * 4)
        for key in ("regional", "new-regional", "new-fleet-wide"):
            r = rows[key]
            old, new = r["whole_fleet"], r["fleet_view"]
            cells = "".join(
                f"{old[m]:>10.4g}{new[m]:>10.4g}"
                for m in ("request_mib", "response_mib", "steady_cpu_s", "first_cpu_s")
            )
            same = "identical" if r["identical_placements"] else "DIFFERENT"
            ok = "" if r["within_targets"] else "  OVER TARGET"
            lines.append(f"  {key:16}{cells}  {same} ({r['placed']} placed){ok}")
        t = out["targets"]
        lines.append(
            f"  {'target (view)':16}{'<= ' + str(t['request_mib']):>20}"
            f"{'<= ' + str(t['response_mib']):>20}{'<= ' + str(t['cpu_s']):>20}"
        )
    lines.append("one resync of every deployment (the view: its reads plus the binder writing it)")
    lines.append(
        f"  {'clusters':>9}{'replicas':>10}{'whole GiB':>12}{'view GiB':>12}"
        f"{'whole CPU s':>13}{'view CPU s':>12}{'view parts':>12}{'view MiB':>10}  placements"
    )
    for r in out["resync"]:
        old, new = r["whole_fleet"], r["fleet_view"]
        same = "identical" if r["identical_placements"] else "DIFFERENT"
        lines.append(
            f"  {r['clusters']:>9,}{r['replicas']:>10,}{old['total_gib']:>12.4g}"
            f"{new['total_gib']:>12.4g}{old['total_cpu_s']:>13.6g}{new['total_cpu_s']:>12.4g}"
            f"{new['view_parts']:>12}{new['view_mib']:>10.3g}  {same}"
        )
    g = out["growth"]
    lines.append(
        f"growth over a {g['fleet']:g}x larger fleet: bytes {g['whole_fleet_bytes']}x whole, "
        f"{g['fleet_view_bytes']}x view; CPU {g['whole_fleet_cpu']}x whole, "
        f"{g['fleet_view_cpu']}x view"
    )
    return "\n".join(lines)
