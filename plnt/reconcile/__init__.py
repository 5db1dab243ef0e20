"""`plnt reconcile`, the control plane's one program beside Crossplane.

The binder (`binder`, deciding in `ledger`) commits proposed ModelReplicas to per-cluster
ledgers and quota ledgers, and publishes the fleet view, each workload cluster's health
(`probe`) and its pools' Ready nodes. The autoscaler (`loop`, deciding in `decision`, reading
`metrics`) scales ModelDeployments toward a generated-tokens-per-second target. `cli` runs
either or both; `kube` and `health` are their Kubernetes and HTTP sides.
"""
