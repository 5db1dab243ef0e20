"""Revisions: a stable short hash of what changes a model's pods.

A ModelDeployment's revision covers `engines`, `serving` and `modelCacheRef` and nothing else,
so scaling (`replicas`), placement (`clusterSelector`), the canary settings and autoscaling
never start a new revision. The hash is over canonical JSON (sorted keys, no whitespace), so
key order in the manifest and YAML formatting do not matter; an absent field and an explicit
null hash alike.

The digest is spelled in the letters a-p (hex digit 0-f -> a-p): a revision is a label value
and part of object names, and an all-hex string such as `6521902e65` reads as a number in
YAML 1.2 (Go's YAML, kubectl), so it could never survive a round trip as a string.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

REVISION_FIELDS = ("engines", "serving", "modelCacheRef")
LENGTH = 10
_LETTERS = str.maketrans("0123456789abcdef", "abcdefghijklmnop")


def revision(spec: Mapping[str, Any], length: int = LENGTH) -> str:
    """The revision of a ModelDeployment (or ModelReplica) spec: `length` letters a-p."""
    canonical = json.dumps(
        {field: spec.get(field) for field in REVISION_FIELDS},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:length].translate(_LETTERS)
