"""What the control plane itself costs while a fleet converges and at rest, per component.

    .venv/bin/python -m tests.e2e.control_plane_cost [--replicas 25,100,200] [--rest 60]
        [--settings package|defaults|fast] [--json FILE]

For each size N it brings up the live control plane of tests/e2e (tests/e2e/stack.py) on a
fresh working directory, with the intervals an install from README runs (``package``, the
default: Crossplane's own poll and circuit breaker, provider-kubernetes' poll and the binder's
interval as package/install sets them), the controllers' own defaults (``defaults``) or the
suite's fast polls (``fast``). One Existing InferenceCluster holds enough H100 nodes for N
one-GPU replicas, and system nodes for their endpoint pickers. Then:

1. the fleet alone at rest for ``--rest`` seconds (the baseline);
2. N one-GPU ModelDeployments of one replica each (examples/deploy-qwen3-8b, which stages no
   weights) in one apply, timed to every ModelReplica Bound and every ModelDeployment Ready;
   the simulated engine start (tests/e2e/workload.py) is part of that time and printed beside it;
3. the fleet at rest again for ``--rest`` seconds, once the starting engines' pod Objects are
   gone (each replica observes its engine's pods only until every copy is available) and after
   a short settle.

It prints, per phase, CPU seconds per minute of every process it started (each API server and
etcd, Crossplane, provider-kubernetes, every plnt function, the binder, and the workload
clusters' stand-ins for kubelets and controllers), the benchmark's own process (the simulator
of what cannot run here, and the waits), API requests per minute per client and verb, and the
managed resources per replica. kube-apiserver's ``apiserver_request_total`` has no client label,
so the per-client counts come from each API server's audit log (Metadata level, one line per
request: a small cost of its own, on the API servers' figures); the metric's total is printed
beside the audit's as a check. Last it says how each figure grows from the smallest to the
largest size.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import math
import os
import pathlib
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import yaml

from functions.model_replica import pods
from tests.e2e import fleet, live, workload
from tests.e2e.stack import DEFAULTS, FAST, PACKAGE, REPO, ControlPlane, Settings

API = "modelplane.ai/v1alpha1"
OBJECT = fleet.OBJECT
NAMESPACE = "bench"
SHARED_BY_NAMESPACE = "Objects shared by the namespace (in all)"
GPUS_PER_NODE = 8
PICKERS_PER_SYSTEM_NODE = 100  # kwok nodes take 110 pods; each replica's picker is one
SETTLE_SECONDS = 15
STARTING_OBJECTS_SECONDS = 120  # a bound on removing the pod Objects of engines now serving
TICKS = os.sysconf("SC_CLK_TCK")
COMPOSED_KINDS = ("ModelReplica", "ModelEndpoint", "ModelService")
# --settings: package/install's (stack.PACKAGE), the programs' own defaults, the suite's polls
SETTINGS = {"package": PACKAGE, "defaults": DEFAULTS, "fast": FAST}

# What each process the stack starts is, for the table: the stack names them (tests/e2e/kube.py
# Processes); anything not listed is shown by its own name.
GROUPS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("plnt functions", lambda n: n.startswith("plnt-function-")),
    ("plnt binder", lambda n: n == "plnt-binder"),
    ("crossplane", lambda n: n == "crossplane"),
    ("provider-kubernetes", lambda n: n == "provider-kubernetes"),
)


# --- what a process has spent ---------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = collections.defaultdict(list)
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree[ppid].append(int(entry.name))
    return tree


def _cpu_seconds(pid: int) -> float:
    """User and system CPU of ``pid`` and of the children it has waited for."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # fields[11:15]: utime, stime, cutime, cstime (stat(5) fields 14-17)
    return sum(int(f) for f in fields[11:15]) / TICKS


def cpu_by_process(plane: ControlPlane) -> dict[str, float]:
    """CPU seconds so far of every process the stack started, its live descendants included
    (a function server's pool workers), and of this process (the simulator runs in it)."""
    tree = _children()
    out: dict[str, float] = {}
    for name, proc in plane.procs.running.items():
        total, stack = 0.0, [proc.pid]
        while stack:
            pid = stack.pop()
            total += _cpu_seconds(pid)
            stack.extend(tree.get(pid, []))
        out[name] = total
    own = resource.getrusage(resource.RUSAGE_SELF)
    out["benchmark (simulator, waits)"] = own.ru_utime + own.ru_stime
    return out


def grouped(cpu: Mapping[str, float]) -> dict[str, float]:
    out: dict[str, float] = collections.defaultdict(float)
    for name, seconds in cpu.items():
        label = next((g for g, match in GROUPS if match(name)), name)
        out[label] += seconds
    return dict(out)


# --- who asked the API servers what -----------------------------------------------------------


# Clients whose User-Agent is their library's: the tests' own client (tests/e2e/kube.py) is the
# simulator's and the benchmark's waits and reads.
CLIENT_NAMES = {"python-httpx": "benchmark (simulator, waits)"}


def _client(user_agent: str) -> str:
    """A client's name from its User-Agent: the program before the first slash."""
    program = user_agent.split("/", 1)[0].strip() or "(none)"
    return CLIENT_NAMES.get(program, program)


def audit_counts(plane: ControlPlane, since: str, until: str) -> dict[tuple[str, str, str], int]:
    """Requests per (API server, client, verb) received within [since, until) (RFC 3339)."""
    counts: dict[tuple[str, str, str], int] = collections.Counter()
    servers = ["mgmt", *(f"wl-{name}" for name in plane.workloads)]
    for server in servers:
        path = plane.audit_log(server)
        if not path.is_file():
            continue
        with path.open() as log:
            for line in log:
                event = json.loads(line)
                received = event.get("requestReceivedTimestamp", "")
                if since <= received < until:
                    key = (server, _client(event.get("userAgent", "")), event.get("verb", ""))
                    counts[key] += 1
    return dict(counts)


def metric_total(plane: ControlPlane) -> dict[str, float]:
    """apiserver_request_total summed over its labels, per API server."""
    out = {}
    for server, api in [
        ("mgmt", plane.mgmt),
        *((f"wl-{n}", a) for n, a in plane.workloads.items()),
    ]:
        text = api.http.get("/metrics").text
        out[server] = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("apiserver_request_total{")
        )
    return out


def _now() -> str:
    # audit timestamps are RFC 3339 with microseconds, in UTC
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000000Z"


# --- one phase ------------------------------------------------------------------------------


@dataclasses.dataclass
class Phase:
    name: str
    seconds: float
    cpu: dict[str, float]  # CPU seconds per process over the phase
    requests: dict[tuple[str, str, str], int]
    metric_requests: dict[str, float]

    def per_minute(self, value: float) -> float:
        return value * 60 / self.seconds if self.seconds else 0.0


class Meter:
    """CPU, requests and the metric's totals between ``start`` and ``stop``."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def start(self) -> None:
        self.t0, self.iso0 = time.monotonic(), _now()
        self.cpu0, self.metric0 = cpu_by_process(self.plane), metric_total(self.plane)

    def stop(self, name: str) -> Phase:
        cpu1, metric1, iso1 = cpu_by_process(self.plane), metric_total(self.plane), _now()
        seconds = time.monotonic() - self.t0
        return Phase(
            name,
            seconds,
            {n: cpu1[n] - self.cpu0.get(n, 0.0) for n in cpu1},
            audit_counts(self.plane, self.iso0, iso1),
            {s: metric1[s] - self.metric0.get(s, 0.0) for s in metric1},
        )


# --- the fleet and its load -----------------------------------------------------------------


def _deployments(replicas: int) -> list[dict[str, Any]]:
    base = yaml.safe_load((REPO / "examples" / "deploy-qwen3-8b" / "xr.yaml").read_text())
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    ]
    for i in range(replicas):
        md = json.loads(json.dumps(base))
        md["metadata"] = {"name": f"qwen-{i:03d}", "namespace": NAMESPACE}
        md["spec"]["replicas"] = 1
        docs.append(md)
    return docs


def _fleet(plane: ControlPlane, replicas: int) -> None:
    """Lab-h100 with room for every replica (one GPU each) and its endpoint picker."""
    nodes = math.ceil(replicas / GPUS_PER_NODE) + 1
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(fleet.control_plane_gateway()))
    fleet.apply_existing_cluster(plane, nodes=nodes)
    extra_system = math.ceil(replicas / PICKERS_PER_SYSTEM_NODE) - 1
    if extra_system > 0:
        plane.simulator.add_nodes(
            plane.workload(fleet.CLUSTER),
            "system-more",
            extra_system,
            labels={fleet.SYSTEM_LABEL: "true"},
            taints=[],
            devices=[],
        )
    live.wait_ready(plane.mgmt, API, "InferenceCluster", fleet.CLUSTER, seconds=600)
    fleet.wait_in_view(plane, fleet.CLUSTER)


def _count(plane: ControlPlane, kind: str, predicate: Callable[[dict], bool]) -> int:
    """How many of the benchmark's ``kind`` match; -1 when the saturated management API server
    did not answer the list in time (the wait asks again)."""
    try:
        listed = plane.mgmt.list(API, kind, namespace=NAMESPACE)
    except httpx.TimeoutException:
        return -1
    return sum(1 for o in listed if predicate(o))


APPLY_SECONDS_PER_REPLICA = 3  # a bound on creating each ModelDeployment on a saturated plane


def _wait_all(
    plane: ControlPlane, kind: str, condition: str, replicas: int, seconds: float
) -> float:
    started = time.monotonic()
    live.wait_for(
        lambda: _count(plane, kind, lambda o: live.is_true(o, condition)) >= replicas,
        seconds,
        f"{replicas} {kind}s {condition}",
        interval=1.0,
    )
    return time.monotonic() - started


def _wait_starting_objects_gone(plane: ControlPlane) -> None:
    """Waits (bounded) for the pod Objects of the engines' collections to go: a replica drops
    its collection once every copy is available, and the garbage collector and
    provider-kubernetes remove its Objects some seconds later on a loaded machine. Any still
    there after the bound are counted, and show in the managed resources per replica (a
    collection Crossplane lost track of stays for the replica's life)."""

    def gone() -> bool:
        return not any(
            pods.MEMBERSHIP_LABEL in (o["metadata"].get("labels") or {})
            for o in plane.mgmt.list(*OBJECT, namespace=NAMESPACE)
        )

    with contextlib.suppress(TimeoutError):
        live.wait_for(gone, STARTING_OBJECTS_SECONDS, "the engines' pod Objects gone", 1.0)


def managed_per_replica(plane: ControlPlane, replicas: int) -> dict[str, float]:
    """Composed resources per replica in the benchmark's namespace: provider-kubernetes Objects
    by the kind they hold, and plnt's composed kinds."""
    by_kind: dict[str, int] = collections.Counter()
    for obj in plane.mgmt.list(*OBJECT, namespace=NAMESPACE):
        manifest = ((obj.get("spec") or {}).get("forProvider") or {}).get("manifest") or {}
        by_kind[f"Object/{manifest.get('kind', '?')}"] += 1
    for kind in COMPOSED_KINDS:
        by_kind[kind] = len(plane.mgmt.list(API, kind, namespace=NAMESPACE))
    by_kind["Object (all)"] = sum(v for k, v in by_kind.items() if k.startswith("Object/"))
    out = {k: v / replicas for k, v in sorted(by_kind.items()) if v}
    # what every replica of the namespace shares on a cluster, composed once by the
    # InferenceCluster (Namespace, the picker's ServiceAccount and RoleBinding): a whole count
    shared = [
        o for o in plane.mgmt.list(*OBJECT) if f"-tenant-{NAMESPACE}-" in o["metadata"]["name"]
    ]
    out[SHARED_BY_NAMESPACE] = float(len(shared))
    return out


@dataclasses.dataclass
class Result:
    replicas: int
    settings: str
    boot_seconds: float
    bound_seconds: float
    ready_seconds: float
    simulated_start_seconds: float
    managed: dict[str, float]
    phases: list[Phase]


def measure(
    workdir: pathlib.Path,
    replicas: int,
    *,
    settings: Settings,
    settings_name: str,
    rest_seconds: float,
    ready_within: float = 1800,
) -> Result:
    plane = ControlPlane(workdir, settings=dataclasses.replace(settings, audit=True))
    try:
        _fleet(plane, replicas)
        meter, phases = Meter(plane), []
        meter.start()
        time.sleep(rest_seconds)
        phases.append(meter.stop("fleet alone, at rest"))

        meter.start()
        # the clock starts before the apply: with a saturated API server, creating the
        # ModelDeployments is itself part of the wait
        started = time.monotonic()
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(_deployments(replicas)),
            timeout=APPLY_SECONDS_PER_REPLICA * replicas + 120,
        )
        bound = time.monotonic() - started
        bound += _wait_all(plane, "ModelReplica", "Bound", replicas, ready_within)
        ready = bound + _wait_all(plane, "ModelDeployment", "Ready", replicas, ready_within)
        phases.append(meter.stop(f"{replicas} replicas converging"))

        _wait_starting_objects_gone(plane)
        time.sleep(SETTLE_SECONDS)
        meter.start()
        time.sleep(rest_seconds)
        phases.append(meter.stop(f"{replicas} replicas at rest"))
        return Result(
            replicas,
            settings_name,
            plane.boot_seconds,
            bound,
            ready,
            workload.ENGINE_START_SECONDS,
            managed_per_replica(plane, replicas),
            phases,
        )
    finally:
        plane.close()


# --- the report -----------------------------------------------------------------------------


def _rows(phase: Phase) -> list[tuple[str, float]]:
    cpu = grouped(phase.cpu)
    return sorted(((n, phase.per_minute(s)) for n, s in cpu.items()), key=lambda r: -r[1])


def report(result: Result) -> str:
    lines = [
        f"== {result.replicas} one-GPU replicas, {result.settings} settings "
        f"(control plane up in {result.boot_seconds:.0f} s)",
        f"all Bound {result.bound_seconds:.1f} s, all Ready {result.ready_seconds:.1f} s after "
        f"the apply (of which the simulated engine start: {result.simulated_start_seconds:.0f} s; "
        "the example stages no weights)",
        "managed resources per replica: "
        + ", ".join(f"{k} {v:.2f}".rstrip("0").rstrip(".") for k, v in result.managed.items()),
    ]
    for phase in result.phases:
        total = sum(phase.per_minute(s) for s in phase.cpu.values())
        lines.append(
            f"-- {phase.name} ({phase.seconds:.0f} s): CPU seconds per minute, {total:.1f} in all"
        )
        lines += [f"   {name:<36} {value:8.2f}" for name, value in _rows(phase)]
        audited = sum(phase.requests.values())
        metric = sum(phase.metric_requests.values())
        lines.append(
            f"   requests per minute: {phase.per_minute(audited):.0f} audited, "
            f"{phase.per_minute(metric):.0f} by apiserver_request_total"
        )
        by_client: dict[tuple[str, str, str], int] = dict(phase.requests)
        for (server, client, verb), count in sorted(by_client.items(), key=lambda kv: -kv[1])[:15]:
            lines.append(f"     {server:<14} {client:<28} {verb:<8} {phase.per_minute(count):8.1f}")
    return "\n".join(lines)


def growth(results: Sequence[Result]) -> str:
    """How each figure grows from the smallest to the largest size, per added replica."""
    if len(results) < 2:
        return ""
    small, large = results[0], results[-1]
    added = large.replicas - small.replicas

    def rest(result: Result) -> float:
        phase = result.phases[-1]
        return sum(phase.per_minute(s) for s in phase.cpu.values())

    def baseline(result: Result) -> float:
        phase = result.phases[0]
        return sum(phase.per_minute(s) for s in phase.cpu.values())

    lines = [f"== growth from {small.replicas} to {large.replicas} replicas"]
    for result in results:
        per_replica = (rest(result) - baseline(result)) / result.replicas
        lines.append(
            f"   {result.replicas:>5} replicas: at rest {rest(result):.1f} CPU s/min "
            f"({per_replica:.3f} per replica above the idle fleet), Bound "
            f"{result.bound_seconds:.0f} s, Ready {result.ready_seconds:.0f} s"
        )
    slope = (rest(large) - rest(small)) / added
    lines.append(f"   each added replica at rest: {slope:.3f} CPU seconds per minute")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", default="25,100,200", help="sizes, comma-separated")
    parser.add_argument("--rest", type=float, default=60.0, help="seconds of each rest window")
    parser.add_argument("--settings", choices=tuple(SETTINGS), default="package")
    parser.add_argument("--json", type=pathlib.Path, help="write the figures here too")
    parser.add_argument("--dir", type=pathlib.Path, help="keep each size's logs under DIR")
    args = parser.parse_args(argv)
    settings = SETTINGS[args.settings]
    results = []
    for size in (int(s) for s in args.replicas.split(",")):
        with tempfile.TemporaryDirectory(prefix=f"plnt-cost-{size}-") as tmp:
            workdir = (args.dir / str(size)) if args.dir else pathlib.Path(tmp)
            result = measure(
                workdir,
                size,
                settings=settings,
                settings_name=args.settings,
                rest_seconds=args.rest,
            )
        print(report(result), flush=True)
        results.append(result)
    print(growth(results))
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        **dataclasses.asdict(r),
                        "phases": [
                            {
                                "name": p.name,
                                "seconds": p.seconds,
                                "cpu_seconds_per_minute": {
                                    n: p.per_minute(s) for n, s in grouped(p.cpu).items()
                                },
                                "requests_per_minute": [
                                    [srv, cl, verb, p.per_minute(c)]
                                    for (srv, cl, verb), c in sorted(p.requests.items())
                                ],
                            }
                            for p in r.phases
                        ],
                    }
                    for r in results
                ],
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
