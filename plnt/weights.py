"""Downloaders that stage model weights from a URI: one per scheme, shared by the ModelCache
staging Job and the ModelReplica weights init container, so both download the same way.

A downloader is an image and a POSIX sh script. The script reads everything from the
environment (``source_env``): ``LOCATION`` (the URI without its scheme), ``DEST`` (the
directory to fill) and, for ``hf://org/model[@revision]``, ``REPO`` and ``REVISION``. A URI
therefore never reaches the shell as code. Credentials come from a Secret the caller names
(its keys become the environment: ``AWS_ACCESS_KEY_ID``, ``HF_TOKEN``, ...), never inline.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Downloader:
    image: str
    script: str  # POSIX sh; reads LOCATION, DEST (and REPO/REVISION for hf) from the environment

    @property
    def command(self) -> list[str]:
        return ["/bin/sh", "-c", self.script]


DOWNLOADERS: dict[str, Downloader] = {
    "s3": Downloader("amazon/aws-cli:2.27.50", 'exec aws s3 sync "s3://$LOCATION" "$DEST"'),
    "gs": Downloader(
        "gcr.io/google.com/cloudsdktool/google-cloud-cli:530.0.0-slim",
        'exec gcloud storage rsync --recursive "gs://$LOCATION" "$DEST"',
    ),
    "hf": Downloader(
        "python:3.12-slim",
        "pip install --no-cache-dir --quiet 'huggingface_hub[hf_xet]==0.34.4' && "
        'exec hf download "$REPO" --revision "$REVISION" --local-dir "$DEST"',
    ),
    "https": Downloader(
        "curlimages/curl:8.15.0",
        'file="${LOCATION%%[?#]*}"; '
        'exec curl --fail --location --retry 5 --output "$DEST/${file##*/}" "https://$LOCATION"',
    ),
}
SCHEMES = tuple(DOWNLOADERS)


def scheme(uri: str) -> str:
    """``s3`` for ``s3://bucket/prefix``; "" when the URI has no ``://``."""
    head, sep, _ = uri.partition("://")
    return head if sep else ""


def location(uri: str) -> str:
    """The URI without its scheme: bucket/prefix, org/model[@revision] or host/path."""
    return uri.partition("://")[2]


def unsupported(uri: str) -> str | None:
    """Why no downloader can stage ``uri``, or None when one can."""
    if scheme(uri) not in DOWNLOADERS:
        return f"unsupported scheme in {display(uri)!r}: supported are " + ", ".join(
            f"{s}://" for s in SCHEMES
        )
    if not location(uri).strip() or any(c.isspace() for c in uri):
        return f"{display(uri)!r} names no location"
    return None


def source_env(uri: str, dest: str) -> list[dict[str, str]]:
    """What a downloader's script reads: where from, where to, and for hf:// repo and revision."""
    loc = location(uri)
    env = [{"name": "LOCATION", "value": loc}, {"name": "DEST", "value": dest}]
    if scheme(uri) == "hf":
        repo, _, revision = loc.partition("@")
        env += [{"name": "REPO", "value": repo}, {"name": "REVISION", "value": revision or "main"}]
    return env


def display(uri: str) -> str:
    """The URI fit for status, conditions and events: no user info, query or fragment (a
    presigned URL carries its signature in the query). Never raises, whatever the input."""
    head, sep, rest = uri.partition("://")
    rest = re.split(r"[?#]", rest if sep else head, maxsplit=1)[0]
    if not sep:
        return rest
    if head not in ("http", "https"):
        return f"{head}://{rest}"  # hf://gpt2@main: an "@" there is a revision
    authority, slash, path = rest.partition("/")
    return f"{head}://{authority.rpartition('@')[2]}{slash}{path}"
