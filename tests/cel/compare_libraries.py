"""The evidence behind the CEL library choice (docs/cel.md): corpus parity and speed.

Runs the oracle corpus and the seeded generated slice through adapters for the two
candidates plnt did not pick, reusing plnt's quantity/semver code, device padding and
Python versions of the string functions, and prints agreement counts and evaluation time.
Not a test (the candidates are not project dependencies). To rerun:

    python3.11 -m venv /tmp/celalt
    /tmp/celalt/bin/pip install cel-python==0.5.0 common-expression-language==0.10.0 \\
        cel-expr-python==0.1.3 protobuf==7.36.2
    /tmp/celalt/bin/python tests/cel/compare_libraries.py   # from the repo root, oracle built
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from plnt import quantity as qty  # noqa: E402
from plnt.cel import MAX_EXPRESSION_LENGTH, _text  # noqa: E402
from plnt.cel import semver as sv  # noqa: E402
from tests.cel import generate  # noqa: E402
from tests.cel.oracle import BINARY, load_corpus, run_oracle  # noqa: E402

SELECTOR = (
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0 && '
    'device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("9.0.0")) >= 0'
)


def _substring(s: str, start: int, end: int | None = None) -> str:
    if end is not None and end > len(s):
        raise IndexError("index out of range")
    return s[start:end]


STRING_FUNCTIONS: dict[str, Callable] = {
    "lowerAscii": lambda s: s.lower(),
    "upperAscii": lambda s: s.upper(),
    "split": lambda s, sep, n=None: s.split(sep) if n is None else s.split(sep, n - 1),
    "replace": lambda s, a, b: s.replace(a, b),
    "indexOf": lambda s, x: s.find(x),
    "lastIndexOf": lambda s, x: s.rfind(x),
    "substring": _substring,
    "trim": lambda s: s.strip(),
    "join": lambda items, sep="": sep.join(items),
    "charAt": lambda s, i: s[i] if i < len(s) else "",
}


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _attribute(attribute: dict) -> tuple[str, object]:
    for kind in ("int", "bool", "string"):
        if attribute.get(kind) is not None:
            return kind, attribute[kind]
    return "version", attribute["version"]


def _domain_maps(device: dict, attribute_value: Callable, capacity_value: Callable):
    driver = device.get("driver", "")
    attributes: dict[str, dict] = {}
    capacity: dict[str, dict] = {}
    for name, attribute in (device.get("attributes") or {}).items():
        domain, ident = _qualified(name, driver)
        attributes.setdefault(domain, {})[ident] = attribute_value(*_attribute(attribute))
    for name, entry in (device.get("capacity") or {}).items():
        domain, ident = _qualified(name, driver)
        capacity.setdefault(domain, {})[ident] = capacity_value(qty.parse_quantity(entry["value"]))
    return driver, attributes, capacity


def rust_adapter() -> tuple[Callable[[str, dict], str], Callable[[], float]]:
    """common-expression-language: no custom value types, so quantities and versions travel
    as tagged maps and every function unpacks them."""
    import cel as rust_cel

    def qmap(value: qty.Quantity) -> dict:
        return {"__kind": "quantity", "value": str(value.value), "int": value.as_int64()[1]}

    def smap(version: sv.Semver) -> dict:
        return {"__kind": "semver", "major": version.major, "minor": version.minor,
                "patch": version.patch, "pre": version.pre_string}  # fmt: skip

    def unpack(value: object, kind: str):
        if not (isinstance(value, dict) and value.get("__kind") == kind):
            raise TypeError("no such overload")
        if kind == "quantity":
            number = Fraction(value["value"])
            return qty.Quantity(number, qty.DECIMAL_SI, (int(number), 0) if value["int"] else None)
        pre = f"-{value['pre']}" if value["pre"] else ""
        return sv.parse_semver(f"{value['major']}.{value['minor']}.{value['patch']}{pre}")

    def compare(a: object, b: object) -> int:
        kind = a.get("__kind") if isinstance(a, dict) else None
        return unpack(a, kind).compare(unpack(b, kind))

    def arith(op: str) -> Callable:
        def apply(a: object, b: object) -> dict:
            other = qty.from_int(b) if isinstance(b, int) else unpack(b, "quantity")
            return qmap(getattr(unpack(a, "quantity"), op)(other))

        return apply

    def as_integer(a: object) -> int:
        value, ok = unpack(a, "quantity").as_int64()
        if not ok:
            raise ValueError("cannot convert value to integer")
        return value

    functions = {
        "quantity": lambda s: qmap(qty.parse_quantity(s)),
        "isQuantity": qty.is_quantity,
        "compareTo": compare,
        "isLessThan": lambda a, b: compare(a, b) < 0,
        "isGreaterThan": lambda a, b: compare(a, b) > 0,
        "sign": lambda a: unpack(a, "quantity").sign(),
        "add": arith("add"),
        "sub": arith("sub"),
        "asInteger": as_integer,
        "isInteger": lambda a: unpack(a, "quantity").as_int64()[1],
        "asApproximateFloat": lambda a: unpack(a, "quantity").as_approximate_float(),
        "semver": lambda s, n=False: smap((sv.normalize_and_parse if n else sv.parse_semver)(s)),
        "isSemver": lambda s, n=False: sv.is_semver(s, n),
        "major": lambda v: unpack(v, "semver").major,
        "minor": lambda v: unpack(v, "semver").minor,
        "patch": lambda v: unpack(v, "semver").patch,
        **STRING_FUNCTIONS,
    }

    def variables(device: dict, domains: frozenset[str] = frozenset()) -> dict:
        driver, attributes, capacity = _domain_maps(
            device,
            lambda kind, v: smap(sv.parse_semver(v)) if kind == "version" else v,
            qmap,
        )
        for domain in domains:
            attributes.setdefault(domain, {})
            capacity.setdefault(domain, {})
        device_map = {"driver": driver, "allowMultipleAllocations": False,
                      "attributes": attributes, "capacity": capacity}  # fmt: skip
        return {"device": device_map}

    def evaluate(expression: str, device: dict) -> str:
        if len(expression) > MAX_EXPRESSION_LENGTH:
            return "error"
        try:
            context = rust_cel.Context(
                variables=variables(device, _text.lookup_domains(expression)), functions=functions
            )
            result = rust_cel.compile(expression).execute(context)
        except BaseException:  # any failure of the library is an "error" outcome
            return "error"
        return ("match" if result else "nomatch") if isinstance(result, bool) else "error"

    def timing(device: dict) -> float:
        program = rust_cel.compile(SELECTOR)
        context = rust_cel.Context(variables=variables(device), functions=functions)
        assert program.execute(context) is True
        return _per_call(lambda: program.execute(context), 2000)

    return evaluate, timing


def celpy_adapter() -> tuple[Callable[[str, dict], str], Callable[[], float]]:
    """cel-python: Python classes for quantity and version, a dict subclass for domains."""
    import celpy
    from celpy import celtypes as ct

    class QuantityValue:
        def __init__(self, value: qty.Quantity) -> None:
            self.q = value

        def __eq__(self, other: object) -> bool:
            return isinstance(other, QuantityValue) and self.q == other.q

        __hash__ = None

    class SemverValue:
        def __init__(self, value: sv.Semver) -> None:
            self.v = value

        def __eq__(self, other: object) -> bool:
            return isinstance(other, SemverValue) and self.v == other.v

        __hash__ = None

    class DomainMap(ct.MapType):
        def __getitem__(self, key: object) -> object:
            try:
                return super().__getitem__(key)
            except KeyError:
                return ct.MapType()

    def compare(a: object, b: object) -> int:
        if isinstance(a, QuantityValue) and isinstance(b, QuantityValue):
            return a.q.compare(b.q)
        if isinstance(a, SemverValue) and isinstance(b, SemverValue):
            return a.v.compare(b.v)
        raise TypeError("no such overload")

    def arith(op: str) -> Callable:
        def apply(a: QuantityValue, b: object) -> QuantityValue:
            other = qty.from_int(int(b)) if isinstance(b, int) else b.q
            return QuantityValue(getattr(a.q, op)(other))

        return apply

    def as_integer(a: QuantityValue) -> ct.IntType:
        value, ok = a.q.as_int64()
        if not ok:
            raise ValueError("cannot convert value to integer")
        return ct.IntType(value)

    def to_python(value: object) -> object:
        if isinstance(value, ct.StringType):
            return str(value)
        if isinstance(value, ct.IntType):
            return int(value)
        if isinstance(value, ct.ListType):
            return [str(item) for item in value]
        return value

    def to_cel(value: object) -> object:
        if isinstance(value, str):
            return ct.StringType(value)
        if isinstance(value, int):
            return ct.IntType(value)
        if isinstance(value, list):
            return ct.ListType([ct.StringType(item) for item in value])
        return value

    def wrap(function: Callable) -> Callable:
        return lambda *args: to_cel(function(*[to_python(a) for a in args]))

    functions = {
        "quantity": lambda s: QuantityValue(qty.parse_quantity(str(s))),
        "isQuantity": lambda s: ct.BoolType(qty.is_quantity(str(s))),
        "compareTo": lambda a, b: ct.IntType(compare(a, b)),
        "isLessThan": lambda a, b: ct.BoolType(compare(a, b) < 0),
        "isGreaterThan": lambda a, b: ct.BoolType(compare(a, b) > 0),
        "sign": lambda a: ct.IntType(a.q.sign()),
        "add": arith("add"),
        "sub": arith("sub"),
        "asInteger": as_integer,
        "isInteger": lambda a: ct.BoolType(a.q.as_int64()[1]),
        "asApproximateFloat": lambda a: ct.DoubleType(a.q.as_approximate_float()),
        "semver": lambda s, n=False: SemverValue(
            (sv.normalize_and_parse if n else sv.parse_semver)(str(s))
        ),
        "isSemver": lambda s, n=False: ct.BoolType(sv.is_semver(str(s), bool(n))),
        "major": lambda v: ct.IntType(v.v.major),
        "minor": lambda v: ct.IntType(v.v.minor),
        "patch": lambda v: ct.IntType(v.v.patch),
        **{name: wrap(fn) for name, fn in STRING_FUNCTIONS.items()},
    }
    env = celpy.Environment()
    scalar = {"int": ct.IntType, "bool": ct.BoolType, "string": ct.StringType}

    def activation(device: dict) -> dict:
        driver, attributes, capacity = _domain_maps(
            device,
            lambda kind, v: scalar[kind](v) if kind in scalar else SemverValue(sv.parse_semver(v)),
            QuantityValue,
        )

        def domains(maps: dict) -> DomainMap:
            return DomainMap(
                {
                    ct.StringType(d): ct.MapType({ct.StringType(k): v for k, v in m.items()})
                    for d, m in maps.items()
                }
            )

        device_map = {
            ct.StringType("driver"): ct.StringType(driver),
            ct.StringType("allowMultipleAllocations"): ct.BoolType(False),
            ct.StringType("attributes"): domains(attributes),
            ct.StringType("capacity"): domains(capacity),
        }
        return {"device": ct.MapType(device_map)}

    def evaluate(expression: str, device: dict) -> str:
        if len(expression) > MAX_EXPRESSION_LENGTH:
            return "error"
        try:
            program = env.program(env.compile(expression), functions=functions)
            result = program.evaluate(activation(device))
        except Exception:  # any failure of the library is an "error" outcome
            return "error"
        if isinstance(result, ct.BoolType):
            return "match" if result else "nomatch"
        return "error"

    def timing(device: dict) -> float:
        program = env.program(env.compile(SELECTOR), functions=functions)
        data = activation(device)
        assert program.evaluate(data)
        return _per_call(lambda: program.evaluate(data), 300)

    return evaluate, timing


def plnt_adapter() -> tuple[Callable[[str, dict], str], Callable[[], float]]:
    from plnt import cel

    def evaluate(expression: str, device: dict) -> str:
        result = cel.matches(expression, device)
        if isinstance(result, cel.CelError):
            return "error"
        return "match" if result else "nomatch"

    def timing(device: dict) -> float:
        compiled, prepared = cel.compile(SELECTOR), cel.Device.of(device)
        return _per_call(lambda: compiled.evaluate(prepared), 2000)

    return evaluate, timing


def _per_call(fn: Callable, rounds: int) -> float:
    """Best of five batches: the least disturbed by other work on the machine."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(rounds):
            fn()
        best = min(best, (time.perf_counter() - start) / rounds)
    return best


def main() -> None:
    corpus = load_corpus()
    generated = generate.cases(20261130, 200)
    oracle = run_oracle(BINARY, corpus + generated)
    h100 = next(c["device"] for c in corpus if c["device"].get("count") == 8)
    adapters = {
        "cel-expr-python 0.1.3 (plnt.cel)": plnt_adapter,
        "common-expression-language 0.10.0": rust_adapter,
        "cel-python 0.5.0": celpy_adapter,
    }
    for name, make in adapters.items():
        evaluate, timing = make()
        agree = {"corpus": 0, "generated": 0}
        for case in corpus + generated:
            part = "generated" if case["id"].startswith("g") else "corpus"
            agree[part] += (
                evaluate(case["expression"], case["device"]) == oracle[case["id"]]["result"]
            )
        per_eval_us = timing(h100) * 1e6
        print(
            f"{name}: corpus {agree['corpus']}/{len(corpus)}, generated "
            f"{agree['generated']}/{len(generated)}, typical selector {per_eval_us:.0f} us/eval"
        )


if __name__ == "__main__":
    main()
