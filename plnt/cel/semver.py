"""Semantic versions exactly as github.com/blang/semver/v4 parses and orders them.

Kubernetes parses DRA `version` attributes and the CEL `semver()` argument with that
library, so the rules (no leading zeroes, build metadata ignored when comparing, the
`normalize` flag of `semver(s, true)`) are reproduced here rather than taken from a
looser Python parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import total_ordering

_NUMBERS = set("0123456789")
_ALPHANUM = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_UINT64_MAX = (1 << 64) - 1


class SemverError(ValueError):
    """Not a semantic version."""


@total_ordering
@dataclass(frozen=True, eq=False)
class Semver:
    major: int
    minor: int
    patch: int
    pre: tuple[str | int, ...] = ()
    build: tuple[str, ...] = ()

    def compare(self, other: Semver) -> int:
        left, right = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if left != right:
            return -1 if left < right else 1
        return _compare_pre(self.pre, other.pre)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __lt__(self, other: Semver) -> bool:
        return self.compare(other) < 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    @property
    def pre_string(self) -> str:
        return ".".join(str(part) for part in self.pre)


def _compare_pre(left: tuple, right: tuple) -> int:
    if not left or not right:
        return (len(left) == 0) - (len(right) == 0)
    for a, b in zip(left, right, strict=False):
        if a == b:
            continue
        if isinstance(a, int) != isinstance(b, int):
            return -1 if isinstance(a, int) else 1
        return -1 if a < b else 1
    return (len(left) > len(right)) - (len(left) < len(right))


def _number(text: str, what: str) -> int:
    if not set(text) <= _NUMBERS:
        raise SemverError(f"Invalid character(s) found in {what} number {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {text!r}")
    if not text or int(text) > _UINT64_MAX:
        raise SemverError(f"invalid {what} number {text!r}")
    return int(text)


def _pre_part(text: str) -> str | int:
    if not text:
        raise SemverError("Prerelease is empty")
    if set(text) <= _NUMBERS:
        return _number(text, "prerelease")
    if not set(text) <= _ALPHANUM:
        raise SemverError(f"Invalid character(s) found in prerelease {text!r}")
    return text


def parse_semver(text: str) -> Semver:
    """semver.Parse: strict MAJOR.MINOR.PATCH[-pre][+build]."""
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major, minor = _number(parts[0], "major"), _number(parts[1], "minor")
    patch_text = parts[2]
    build: tuple[str, ...] = ()
    pre: tuple[str | int, ...] = ()
    if "+" in patch_text:
        patch_text, build_text = patch_text.split("+", 1)
        build = tuple(build_text.split("."))
        for item in build:
            if not item or not set(item) <= _ALPHANUM:
                raise SemverError(f"Invalid build metadata {item!r}")
    if "-" in patch_text:
        patch_text, pre_text = patch_text.split("-", 1)
        pre = tuple(_pre_part(item) for item in pre_text.split("."))
    return Semver(major, minor, _number(patch_text, "patch"), pre, build)


def normalize_and_parse(text: str) -> Semver:
    """semver(s, true): drop a "v", strip leading zeroes, fill a short version with zeroes."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            if not stripped or stripped[0] not in _NUMBERS:
                stripped = "0" + stripped
            parts[index] = stripped
    if len(parts) < 3:
        if any(ch in parts[-1] for ch in "+-"):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse_semver(".".join(parts))


def is_semver(text: str, normalize: bool = False) -> bool:
    try:
        (normalize_and_parse if normalize else parse_semver)(text)
    except SemverError:
        return False
    return True
