"""`plnt reconcile`, the control plane's one program beside Crossplane: a package of its own
beside plnt_host, which neither the functions nor the library import, and which only the
reconciler's image carries (with the Kubernetes client, the `reconciler` extra).

The binder (`binder`, deciding with plnt.capacity.commit, the pure decision the library keeps
so `plnt render` previews it) commits proposed ModelReplicas to per-cluster ledgers and quota
ledgers, reading watch-fed caches (`reads`, `reflector`), and publishes the fleet view, each
workload cluster's health (`probe`) and its pools' Ready nodes. The autoscaler (`loop`,
deciding in `decision`, pure, reading `metrics`) scales ModelDeployments toward a
generated-tokens-per-second target. `cli` runs either or both; `kube` and `health` are their
Kubernetes and HTTP sides.
"""
