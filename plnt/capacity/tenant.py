"""A tenant: one namespace as admission and quotas read it, so the ModelDeployment function's
scheduler and the binder answer "may this namespace place on that cluster, and how much may it
hold" with the same code.

- `admitted_by(fence)`: whether an InferenceCluster's fence admits the namespace
  (plnt.capacity.admission, over the namespace's labels);
- `exceeds(asks, pending)`: why `asks` does not fit some quota covering the namespace after
  what its ledger reserves and `pending` (plnt.capacity.quotas.exceeds), or ''.

Invariant: a tenant holds exactly the quota ledgers that cover its namespace, and its labels
always carry the name label Kubernetes sets on every Namespace, so a fence selecting by name
reads the same for a namespace that exists and one whose object is not read yet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from plnt.capacity import admission, quotas


@dataclasses.dataclass(frozen=True)
class Tenant:
    namespace: str
    labels: Mapping[str, str]
    quota_ledgers: tuple[quotas.QuotaLedger, ...] = ()

    @classmethod
    def of(
        cls,
        namespace: str,
        namespace_obj: Mapping[str, Any] | None,
        quota_ledgers: Iterable[quotas.QuotaLedger] = (),
    ) -> Tenant:
        """The tenant of `namespace` from its Namespace object (None: labels unknown but its
        name's) and the quota ledgers (those not covering it are left out)."""
        return cls(
            namespace,
            admission.namespace_labels(namespace_obj, namespace),
            tuple(q for q in quota_ledgers if namespace in q.namespaces),
        )

    def admitted_by(self, fence: Mapping[str, Any] | None) -> bool:
        return admission.admits(fence, self.labels)

    def exceeds(self, asks: Mapping[str, int], pending: Sequence[Mapping[str, int]] = ()) -> str:
        for q in self.quota_ledgers:
            why = quotas.exceeds(q, asks, self.namespace, pending)
            if why:
                return why
        return ""
