"""The base every spec model shares: read the XR as the API server's schema does."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class SpecModel(BaseModel):
    """Strict types ("2" is not a count, 1.5 not an integer); unknown fields are ignored."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", strict=True)

    def dump(self) -> dict[str, Any]:
        """Kubernetes-shaped data: camelCase, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True)


class NonNullSpecModel(SpecModel):
    """Also refuses explicit nulls: the API server prunes nulls the schema does not allow, so one
    reaching a function (crossplane render, a stale client) is invalid input, not "unset"."""

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("may not be null")
        return value
