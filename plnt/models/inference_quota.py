"""InferenceQuota spec (apis/inferencequotas): namespaces by label, hard devices per class."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from plnt.models.base import SpecModel
from plnt.models.model_deployment import ClusterSelector


class Hard(SpecModel):
    devices: dict[str, Annotated[int, Field(ge=0)]] = Field(min_length=1)


class InferenceQuotaSpec(SpecModel):
    namespace_selector: ClusterSelector = Field(alias="namespaceSelector")
    hard: Hard
