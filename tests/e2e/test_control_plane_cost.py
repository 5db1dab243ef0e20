"""The control-plane cost benchmark (tests/e2e/control_plane_cost.py), small: it runs on a
stack of its own, and reports what it must whatever the machine's speed. The figures themselves
come from `python -m tests.e2e.control_plane_cost`, never from a test."""

from __future__ import annotations

import shutil

from tests.e2e import control_plane_cost as cost
from tests.e2e import stack
from tests.e2e.stack import FAST

REPLICAS = 2
# what a Standalone one-GPU replica composes on its cluster (docs/model-replica.md)
OBJECT_KINDS = {"Deployment", "Service", "ResourceClaimTemplate", "InferencePool"}


def test_the_benchmark_reports_every_component_and_the_objects_per_replica(e2e_dir) -> None:
    result = cost.measure(
        e2e_dir("cost"), REPLICAS, settings=FAST, settings_name="fast", rest_seconds=10
    )
    print(cost.report(result))

    assert result.bound_seconds > 0 and result.ready_seconds >= result.bound_seconds
    assert result.managed["ModelReplica"] == 1
    objects = {k.split("/", 1)[1] for k in result.managed if k.startswith("Object/")}
    assert objects == OBJECT_KINDS | {"HTTPRoute"}, objects
    assert result.managed["Object (all)"] == 6  # two Deployments, Service, pool, claims, route
    # the Namespace, the picker's ServiceAccount and RoleBinding, once for both replicas
    assert result.managed[cost.SHARED_BY_NAMESPACE] == 3
    per_kind = sum(v for k, v in result.managed.items() if k.startswith("Object/"))
    assert result.managed["Object (all)"] == per_kind
    # every replica composes the same set: a whole number of Objects each
    assert float(per_kind).is_integer(), result.managed

    assert [p.name for p in result.phases] == [
        "fleet alone, at rest",
        f"{REPLICAS} replicas converging",
        f"{REPLICAS} replicas at rest",
    ]
    converging = cost.grouped(result.phases[1].cpu)
    for component in (
        "mgmt-apiserver",
        "mgmt-etcd",
        "wl-lab-h100-apiserver",
        "wl-lab-h100-etcd",
        "crossplane",
        "provider-kubernetes",
        "plnt functions",
        "plnt binder",
    ):
        assert converging.get(component, 0) > 0, (component, converging)
    clients = {client for (_, client, _) in result.phases[1].requests}
    assert {"crossplane-core", "provider-kubernetes", "plnt-reconcile"} <= clients, clients
    assert sum(result.phases[1].requests.values()) > 0
    assert sum(result.phases[1].metric_requests.values()) > 0


def test_the_package_settings_are_what_package_install_sets(tmp_path, monkeypatch) -> None:
    """`--settings package` runs what an install from README runs: Crossplane's own flags,
    provider-kubernetes' poll from its runtime config in package/install and the binder's
    interval from the reconciler's arguments there, read from the files, so that a change there
    changes the profile."""
    assert cost.SETTINGS["package"] == stack.PACKAGE
    assert (stack.PACKAGE.crossplane_poll, stack.PACKAGE.circuit_breaker) == (None, ())
    # docs/sizing.md's recommendation: engines' Objects watch, every other Object polls each minute
    assert stack.PACKAGE.provider_poll == "1m"
    assert stack.PACKAGE.provider_watches
    assert not stack.DEFAULTS.provider_watches  # provider-kubernetes' own default
    # settings.yaml sets no --bind-interval: the binder's own default
    assert stack.PACKAGE.bind_interval == 2.0

    copy = tmp_path / "install"
    shutil.copytree(stack.INSTALL, copy)
    edits = {
        "provider-kubernetes.yaml": ("- --poll=1m\n", "- --poll=2m\n"),
        "settings.yaml": ("- --bind\n", "- --bind\n                - --bind-interval=5\n"),
    }
    for name, (text, replacement) in edits.items():
        source = (copy / name).read_text()
        assert source.count(text) == 1, (name, text)
        (copy / name).write_text(source.replace(text, replacement))
    monkeypatch.setattr(stack, "INSTALL", copy)
    changed = stack.package_settings()
    assert (changed.provider_poll, changed.bind_interval) == ("2m", 5.0)
