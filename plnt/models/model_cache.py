"""Typed ModelCache spec, mirroring apis/modelcaches/definition.yaml."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from plnt.models.base import NonNullSpecModel
from plnt.models.model_replica import QUANTITY

SOURCE_URI = r"^(s3|gs|hf|https)://[^\s]+$"


_Model = NonNullSpecModel


class Source(_Model):
    uri: str = Field(min_length=6, max_length=2048, pattern=SOURCE_URI)
    secret_name: str | None = Field(default=None, alias="secretName", min_length=1, max_length=253)

    @property
    def scheme(self) -> str:
        return self.uri.split("://", 1)[0]

    @property
    def location(self) -> str:
        """The URI without its scheme: bucket/prefix, org/model[@revision] or host/path."""
        return self.uri.split("://", 1)[1]


class ModelCacheSpec(_Model):
    cluster_name: str = Field(alias="clusterName", min_length=1)
    source: Source
    size: int | Annotated[str, StringConstraints(pattern=QUANTITY)]
    storage_class_name: str | None = Field(
        default=None, alias="storageClassName", min_length=1, max_length=253
    )
