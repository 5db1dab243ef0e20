"""InferenceQuota spec (apis/inferencequotas): namespaces by label, hard devices per class."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from plnt.models.base import SpecModel
from plnt.models.model_deployment import ClusterSelector
from plnt.models.model_replica import QUANTITY


class Hard(SpecModel):
    devices: dict[str, Annotated[int, Field(ge=0)]] = Field(min_length=1)
    cache_storage: int | Annotated[str, StringConstraints(pattern=QUANTITY)] | None = Field(
        default=None, alias="cacheStorage"
    )


class InferenceQuotaSpec(SpecModel):
    namespace_selector: ClusterSelector = Field(alias="namespaceSelector")
    hard: Hard
