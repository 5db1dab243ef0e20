"""Seeded random (expression, device) pairs for checking plnt.cel against the oracle.

Expressions are built from the pieces DRA selectors are made of: attribute and capacity
lookups (present, missing, in a missing domain, of the wrong type), quantity and semver
comparisons, string functions, macros, and boolean combinations of those.
"""

from __future__ import annotations

import random

DOMAINS = ["gpu.nvidia.com", "gpu.amd.com", "other.example.com"]
NAMES = ["productName", "index", "mig", "cc", "arch", "count"]
QUANTITIES = [
    "0",
    "1",
    "500m",
    "1000m",
    "1.5",
    "2k",
    "24Gi",
    "40Gi",
    "48Gi",
    "80Gi",
    "81920Mi",
    "1e3",
    "-1",
    "1.5Gi",
]
VERSIONS = ["8.0.0", "8.9.0", "9.0.0", "9.0.0-rc.1", "10.1.2", "1.2.3+b"]
NUMBERS = ["0", "1", "-1", "1.5", "2u", "0.0", "85899345920", "1e10", "0x10"]
NUMERIC_FNS = ["asInteger()", "asApproximateFloat()", "sign()", 'compareTo(quantity("1"))']
STRINGS = ["NVIDIA H100", "NVIDIA L40S", "AMD MI300X", "Hopper", "", "x"]


def device(rng: random.Random) -> dict:
    driver = rng.choice(DOMAINS)
    attributes: dict[str, dict] = {}
    for name in rng.sample(NAMES, rng.randint(0, len(NAMES))):
        key = name if rng.random() < 0.7 else f"{rng.choice(DOMAINS)}/{name}"
        # Mostly "cc" holds a version; any name may (`==` against a version is an error).
        kind = rng.choice(["string", "int", "bool"] + (["version"] * (3 if name == "cc" else 1)))
        value = {
            "string": lambda: rng.choice(STRINGS),
            "int": lambda: rng.randint(-3, 20),
            "bool": lambda: rng.random() < 0.5,
            "version": lambda: rng.choice(VERSIONS),
        }[kind]()
        attributes[key] = {kind: value}
    capacity = {
        (n if rng.random() < 0.7 else f"{rng.choice(DOMAINS)}/{n}"): {
            "value": rng.choice(QUANTITIES)
        }
        for n in rng.sample(["memory", "power", "cores"], rng.randint(0, 3))
    }
    return {
        "name": "d",
        "claim": "DRA",
        "driver": driver,
        "count": 1,
        "attributes": attributes,
        "capacity": capacity,
    }


def _attr(rng: random.Random, names: list[str] = NAMES) -> str:
    return f'device.attributes["{rng.choice(DOMAINS)}"].{rng.choice(names)}'


def _cap(rng: random.Random) -> str:
    return f'device.capacity["{rng.choice(DOMAINS)}"].{rng.choice(["memory", "power", "cores"])}'


def quantity_text(rng: random.Random) -> str:
    """A random, often malformed, quantity string: sign, digits, fraction, suffix, exponent."""
    sign = rng.choice(["", "", "-", "+"])
    whole = rng.choice(["", "0", "1", "7", "10", "1000", "123456789", "9223372036854775807"])
    frac = rng.choice(["", "", ".", ".5", ".05", ".123456789012", ".0"])
    suffix = rng.choice(
        [
            "",
            "",
            "m",
            "n",
            "u",
            "k",
            "M",
            "G",
            "Ki",
            "Mi",
            "Gi",
            "Ei",
            "E",
            "e3",
            "e-2",
            "E+1",
            "x",
            "K",
            "i",
        ]
    )
    return f"{sign}{whole}{frac}{suffix}"


def _ordering(rng: random.Random) -> str:
    return rng.choice(["<", ">", "<=", ">="])


def atom(rng: random.Random) -> str:
    q = f'quantity("{rng.choice(QUANTITIES)}")'
    v = f'semver("{rng.choice(VERSIONS)}")'
    s = f'"{rng.choice(STRINGS)}"'
    choices = [
        lambda: f"{_cap(rng)}.compareTo({q}) {rng.choice(['<', '<=', '==', '>=', '>'])} 0",
        lambda: f"{_cap(rng)}.{rng.choice(['isLessThan', 'isGreaterThan'])}({q})",
        lambda: f"{q}.{rng.choice(['isLessThan', 'isGreaterThan'])}({q})",
        lambda: f"{_cap(rng)}.{rng.choice(['isInteger()', 'asInteger() > 10', 'sign() == 1'])}",
        lambda: f"{q}.add({rng.randint(-2, 2)}).compareTo({q}) > 0",
        lambda: f"{_attr(rng)}.compareTo({v}) {rng.choice(['<', '>=', '=='])} 0",
        lambda: f"{v}.{rng.choice(['isLessThan', 'isGreaterThan'])}({v})",
        lambda: f"{_attr(rng)}.{rng.choice(['major()', 'minor()'])} >= {rng.randint(0, 10)}",
        lambda: f"{_attr(rng)} == {rng.choice([s, v, str(rng.randint(-1, 5)), 'true', 'false'])}",
        lambda: f"{_attr(rng)} {rng.choice(['<', '>'])} {rng.randint(-1, 5)}",
        lambda: f"{_attr(rng)}.{rng.choice(['startsWith', 'endsWith', 'contains'])}({s})",
        lambda: f"{_attr(rng)}.lowerAscii().contains({s})",
        lambda: f"{_attr(rng)}",
        lambda: f'device.driver == "{rng.choice(DOMAINS)}"',
        lambda: f'device.attributes["{rng.choice(DOMAINS)}"].size() {rng.choice(["==", ">"])} 0',
        lambda: f'has(device.attributes["{rng.choice(DOMAINS)}"].{rng.choice(NAMES)})',
        lambda: f'"{rng.choice(NAMES)}" in device.attributes["{rng.choice(DOMAINS)}"]',
        lambda: f"[{q}, {q}].all(x, {_cap(rng)}.compareTo(x) >= 0)",
        lambda: f'device.attributes["{rng.choice(DOMAINS)}"].exists(k, k == "{rng.choice(NAMES)}")',
        lambda: f"isQuantity({s}) == {rng.choice(['true', 'false'])}",
        lambda: f"{_attr(rng)} {rng.choice(['<', '>='])} {rng.choice(NUMBERS)}",
        lambda: f"{_attr(rng)} {rng.choice(['==', '!='])} {rng.choice(NUMBERS)}",
        lambda: f"{rng.choice([s, v, 'null'])} {rng.choice(['==', '!='])} {_attr(rng)}",
        lambda: f"{rng.choice([q, _cap(rng)])} {rng.choice(['==', '!='])} {q}",
        lambda: f"{_cap(rng)} == dyn({rng.choice([q, s, v])})",
        lambda: f"{_cap(rng)}.asInteger() {_ordering(rng)} {_cap(rng)}.asApproximateFloat()",
        lambda: f"{_attr(rng)} {_ordering(rng)} {_cap(rng)}.asApproximateFloat()",
        lambda: (
            f'device.attributes["{rng.choice(DOMAINS)[:4]}" + "{rng.choice(DOMAINS)[4:]}"]'
            f".size() {rng.choice(['==', '>'])} 0"
        ),
        lambda: (
            f'device.capacity["gpu." + "{rng.choice(["nvidia.com", "amd.com", "x"])}"]'
            f".{rng.choice(['memory', 'power'])}.sign() == 1"
        ),
        lambda: f"[{rng.choice([s, q, _attr(rng)])}, {rng.choice([s, q, _attr(rng)])}].size() == 2",
        lambda: f"{_cap(rng)}.{rng.choice(NUMERIC_FNS)} {_ordering(rng)} {rng.choice(NUMBERS)}",
        lambda: f"{rng.choice(NUMBERS)} {rng.choice(['<', '>='])} {rng.choice(NUMBERS)}",
        lambda: f'isQuantity("{quantity_text(rng)}")',
        lambda: f'quantity("{quantity_text(rng)}").compareTo(quantity("{quantity_text(rng)}")) < 0',
        lambda: f'quantity("{quantity_text(rng)}").{rng.choice(["isInteger()", "sign() == 1"])}',
        lambda: (
            f'quantity("{quantity_text(rng)}").asInteger() {_ordering(rng)} {rng.choice(NUMBERS)}'
        ),
        lambda: (
            f'quantity("{quantity_text(rng)}").add(quantity("{quantity_text(rng)}")).isInteger()'
        ),
        lambda: f'quantity("{quantity_text(rng)}").sub({rng.randint(-3, 3)}).sign() == 1',
        lambda: (
            f'device.attributes["{rng.choice(DOMAINS)}"].transformMap(k, v, k.startsWith('
            f'"{rng.choice(NAMES)[:1]}"), v).size() {_ordering(rng)} {rng.randint(0, 3)}'
        ),
        lambda: (
            f'device.capacity["{rng.choice(DOMAINS)}"].transformMap(k, v, v.compareTo({q}) >= 0)'
            f'["{rng.choice(["memory", "power"])}"]'
        ),
        lambda: (
            f'device.attributes["{rng.choice(DOMAINS)}"].transformMapEntry(k, v, {{k + "x": v}})'
            f'.exists(k, k == "{rng.choice(NAMES)}x")'
        ),
    ]
    return rng.choice(choices)()


def expression(rng: random.Random, depth: int = 0) -> str:
    if depth >= 2 or rng.random() < 0.4:
        return atom(rng)
    form = rng.choice(["and", "or", "not", "ternary"])
    left, right = expression(rng, depth + 1), expression(rng, depth + 1)
    return {
        "and": f"({left}) && ({right})",
        "or": f"({left}) || ({right})",
        "not": f"!({left})",
        "ternary": f"({left}) ? ({right}) : ({atom(rng)})",
    }[form]


def cases(seed: int, count: int) -> list[dict]:
    rng = random.Random(seed)
    return [
        {"id": f"g{i:05d}", "expression": expression(rng), "device": device(rng)}
        for i in range(count)
    ]
