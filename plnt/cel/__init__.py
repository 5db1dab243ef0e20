"""DRA device-selector CEL, with the semantics of k8s.io/dynamic-resource-allocation/cel.

`evaluate(expression, device)` answers whether an InferenceClass device (a `spec.devices[]`
entry) satisfies a selector, or raises `CelError`. The expression sees `device.driver`,
`device.attributes["<domain>"].<name>` and `device.capacity["<domain>"].<name>`; bare names
live under the device's driver domain; looking up a domain the device does not have yields
an empty map and a missing name is an error, as in Kubernetes. Library choice, limits and the
known differences from Kubernetes are in docs/cel.md; tests/cel checks every corpus case
against Kubernetes' own implementation (tests/oracle).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from plnt import quantity as q
from plnt.cel import _checked, _text
from plnt.cel import _library as lib
from plnt.cel import semver as sv

MAX_EXPRESSION_LENGTH = 10 * 1024  # resourceapi.CELSelectorExpressionMaxLength
MAX_COMPREHENSION_DEPTH = 2  # see "Cost" in docs/cel.md
# cel-expr-python's parser stops at depth 32, cel-go's at 250 (docs/cel.md, "Known differences").
_TOO_DEEP = (
    "nested or chained more than 32 levels deep, the limit of plnt's CEL parser (Kubernetes"
    " allows 250); group a long chain of operators or calls with parentheses"
)

_ENV = lib.new_env()
_TYPED_FIELDS = {
    lib.DRIVER_VAR: "driver",
    lib.ATTRIBUTES_VAR: "attributes",
    lib.CAPACITY_VAR: "capacity",
}
_REWRITER = _checked.Rewriter(
    templates={
        name: _checked.Checked.of(_ENV.compile(text).serialize())
        for name, text in lib.TEMPLATES.items()
    },
    domain_map_types=frozenset(
        _checked.result_type(_ENV.compile(var).serialize())
        for var in (lib.ATTRIBUTES_VAR, lib.CAPACITY_VAR)
    ),
)


class CelError(Exception):
    """A selector that does not compile, fails at run time, or does not yield a bool."""

    def __init__(self, expression: str, message: str) -> None:
        where = f"CEL expression {_short(expression)!r}: " if expression else "CEL device: "
        super().__init__(where + message)
        self.expression = expression
        self.reason = message


def _short(expression: str) -> str:
    return expression if len(expression) <= 120 else expression[:117] + "..."


@dataclass(frozen=True)
class CompiledSelector:
    """A compiled expression plus the domains it may look up (padded with empty maps)."""

    expression: str
    program: Any
    domains: frozenset[str]

    def evaluate(self, device: dict | Device) -> bool:
        view = device if isinstance(device, Device) else Device.of(device)
        try:
            result = self.program.eval(view.activation(self.domains))
        except Exception as err:  # cel-expr-python raises RuntimeError on evaluation faults
            raise CelError(self.expression, _clean(str(err))) from None
        kind = result.type().name()
        if result.type() == lib.cel.Type.ERROR:
            raise CelError(self.expression, _clean(str(result.value())))
        if result.type() != lib.cel.Type.BOOL:
            raise CelError(self.expression, f"result is a {kind}, a selector must yield a bool")
        return bool(result.value())


def _clean(message: str) -> str:
    message = re.sub(r"\s*\[[A-Z_]+\]$", "", message.strip()).removeprefix("INVALID_ARGUMENT: ")
    for var, field_name in _TYPED_FIELDS.items():
        message = message.replace(var, f"device.{field_name}")
    return message.replace("plnt__k8s_equals", "_==_")


@dataclass(frozen=True)
class Device:
    """An InferenceClass device converted once into the `device` CEL variable."""

    data: dict
    _activations: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, device: dict) -> Device:
        driver = device.get("driver") or ""
        attributes: dict[str, dict] = {}
        for name, attribute in (device.get("attributes") or {}).items():
            domain, ident = _qualified(name, driver)
            attributes.setdefault(domain, {})[ident] = _attribute_value(name, attribute)
        capacity: dict[str, dict] = {}
        for name, entry in (device.get("capacity") or {}).items():
            domain, ident = _qualified(name, driver)
            raw = entry.get("value") if isinstance(entry, dict) else entry
            try:
                value = q.parse_quantity(str(raw))
            except q.QuantityError as err:
                raise CelError("", f"capacity {name}: {err}") from None
            capacity.setdefault(domain, {})[ident] = lib.quantity_message(value)
        data = {
            "driver": driver,
            "allowMultipleAllocations": bool(device.get("allowMultipleAllocations", False)),
            "attributes": attributes,
            "capacity": capacity,
        }
        return cls(data)

    def activation(self, domains: frozenset[str]) -> Any:
        """The CEL variables for expressions looking up `domains`, converted once and kept:
        conversion costs more than evaluating a typical selector."""
        activation = self._activations.get(domains)
        if activation is None:
            data = self.padded(domains) if domains else self.data
            variables = {
                "device": data,
                lib.DRIVER_VAR: data["driver"],
                lib.ATTRIBUTES_VAR: data["attributes"],
                lib.CAPACITY_VAR: data["capacity"],
            }
            activation = self._activations[domains] = _ENV.Activation(data=variables)
        return activation

    def padded(self, domains: frozenset[str]) -> dict:
        data = dict(self.data)
        for key in ("attributes", "capacity"):
            present = data[key]
            missing = [d for d in domains if d not in present]
            if missing:
                data[key] = {**present, **{d: {} for d in missing}}
        return data


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _attribute_value(name: str, attribute: dict) -> Any:
    """One value per attribute, in DeviceAttribute's order: int, bool, string, version."""
    if not isinstance(attribute, dict):
        raise CelError("", f"attribute {name}: expected one of int, bool, string, version")
    for kind in ("int", "bool", "string"):
        if attribute.get(kind) is not None:
            return attribute[kind]
    if attribute.get("version") is not None:
        try:
            return lib.semver_message(sv.parse_semver(attribute["version"]))
        except sv.SemverError as err:
            raise CelError("", f"attribute {name}: parse semantic version: {err}") from None
    raise CelError("", f"attribute {name}: unsupported attribute value")


def _compile_program(expression: str, padded: frozenset[str]) -> Any:
    """cel-cpp compile, then what Kubernetes' environment adds: the homogeneous-literal
    check, and Kubernetes' equality and domain lookups where they differ (_checked)."""
    text = _text.typed_fields(expression, {f: var for var, f in _TYPED_FIELDS.items()})
    try:
        program = _ENV.compile(text)
    except Exception as err:  # cel-expr-python raises RuntimeError with the checker's issues
        message = _clean(str(err))
        if "recursion" in message:
            message = _TOO_DEEP
        raise CelError(expression, "compilation failed: " + message) from None
    checked = _checked.Checked.of(program.serialize())
    problem = _checked.homogeneity_error(checked)
    if problem:
        raise CelError(expression, "compilation failed: " + problem)
    if _REWRITER.rewrite(checked, padded):
        program = _ENV.deserialize(checked.serialize())
    return program


def compile(expression: str) -> CompiledSelector:
    """Compile once (cached); raises CelError for syntax and type errors and over-limit input."""
    if not isinstance(expression, str):
        raise CelError(str(expression), "expression must be a string")
    return _compile_cached(expression)


def compile_uncached(expression: str) -> CompiledSelector:
    """What compile() caches; for benchmarks."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CelError(
            expression, f"expression too long: {len(expression)} > {MAX_EXPRESSION_LENGTH}"
        )
    if _text.comprehension_depth(expression) > MAX_COMPREHENSION_DEPTH:
        raise CelError(
            expression, f"comprehensions nested deeper than {MAX_COMPREHENSION_DEPTH} levels"
        )
    domains = _text.lookup_domains(expression)
    return CompiledSelector(expression, _compile_program(expression, domains), domains)


_compile_cached = lru_cache(maxsize=4096)(compile_uncached)


def evaluate(expression: str, device: dict | Device) -> bool:
    """Whether the device satisfies the selector; CelError when the selector does not
    compile, fails on this device, or yields something other than a bool."""
    return compile(expression).evaluate(device)


def matches(expression: str, device: dict | Device) -> bool | CelError:
    """Like evaluate, but hands the error back instead of raising it."""
    try:
        return evaluate(expression, device)
    except CelError as err:
        return err


__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "CelError",
    "CompiledSelector",
    "Device",
    "compile",
    "compile_uncached",
    "evaluate",
    "matches",
]
