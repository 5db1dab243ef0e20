"""Hypothesis strategies that mutate an example XR's spec, blind and schema-aware.

Blind mutations delete a field, retype it with a nasty value or duplicate a list item. The
schema-aware ones read the XRD at the mutated path, so that many mutants stay valid (or are
invalid by exactly one bound) and reach the code that composes: a value at or just past a bound,
an enum member, a string grown to its maxLength or given a trailing newline, an absent optional
field added with a generated value.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from tests.fuzz import apiserver

NASTY_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.sampled_from([0, -1, 1, 63, 64, 65, 1000, 1001, 10**9]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(
        ["", "x" * 300, "UPPER_case", "-leading", "a/b", "1.2.3", "Nope", "GPU", "a\n", "a.b"]
    ),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
ACTIONS = ["delete", "replace", "duplicate", "tweak", "tweak", "add"]


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


def parent_of(root: Any, path: tuple) -> tuple[Any, Any]:
    node = root
    for part in path[:-1]:
        node = node[part]
    return node, path[-1]


def near(value: Any, schema: dict[str, Any] | None) -> st.SearchStrategy[Any]:
    """Values next to ``value`` as its schema sees it: its bounds, its enum, its neighbours."""
    schema = schema or {}
    options: list[st.SearchStrategy[Any]] = []
    if schema.get("enum"):
        options.append(st.sampled_from(schema["enum"]))
    if isinstance(value, bool):
        options.append(st.just(not value))
    elif isinstance(value, int):
        bounds = [value - 1, value + 1, 0, 1]
        for key in ("minimum", "maximum"):
            if key in schema:
                bounds += [schema[key] - 1, schema[key], schema[key] + 1]
        options.append(st.sampled_from(bounds))
    elif isinstance(value, str):
        longest = schema.get("maxLength", 64)
        options.append(
            st.sampled_from(
                [
                    value + "\n",
                    value + "-",
                    value.upper(),
                    value[:1],
                    (value or "a") * (longest // max(len(value), 1) + 1),
                    ((value or "a") * longest)[:longest],
                    ((value or "a") * (longest + 1))[: longest + 1],
                ]
            )
        )
    elif isinstance(value, list):
        options.append(st.just(value[:1]))
        options.append(st.just([]))
        if value:
            options.append(st.just([copy.deepcopy(value[0]) for _ in range(9)]))
    options.append(generated(schema))
    return st.one_of(options)


def generated(schema: dict[str, Any] | None, depth: int = 0) -> st.SearchStrategy[Any]:
    """A value drawn from ``schema``: mostly valid, with its required fields, depth-limited."""
    schema = schema or {}
    if schema.get("enum"):
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "boolean":
        return st.booleans()
    if kind == "integer" or schema.get("x-kubernetes-int-or-string"):
        low, high = schema.get("minimum", -5), schema.get("maximum", 2000)
        return st.one_of(st.integers(low, high), st.sampled_from([low - 1, low, high, high + 1]))
    if kind == "number":
        low = schema.get("minimum", -5)
        return st.one_of(
            st.floats(min_value=low, max_value=1e6, allow_nan=False),
            st.sampled_from([low, low + 1, low - 1, 0.5]),
        )
    if kind == "string":
        too_long = "a" * (schema.get("maxLength", 63) + 1)
        return st.one_of(_string(schema), st.just(too_long))
    if kind == "array" and depth < 3:
        return st.lists(
            generated(schema.get("items"), depth + 1),
            min_size=schema.get("minItems", 0),
            max_size=min(schema.get("maxItems", 3), 3),
        )
    if kind == "object" and depth < 3:
        props = schema.get("properties") or {}
        required = {k: generated(props.get(k), depth + 1) for k in schema.get("required", [])}
        optional = {k: generated(v, depth + 1) for k, v in props.items() if k not in required}
        return st.fixed_dictionaries(required, optional=optional)
    return NASTY_VALUES


def _string(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    low, high = schema.get("minLength", 0), min(schema.get("maxLength", 40), 300)
    if "pattern" in schema:
        return st.from_regex(apiserver.go_pattern(schema["pattern"]), fullmatch=True).filter(
            lambda s: low <= len(s) <= high
        )
    return st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=low, max_size=high)


def mutate(draw: st.DrawFn, root: Any, schema: dict[str, Any] | None) -> None:
    """One to three mutations of ``root`` (a spec or a status) in place."""
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        candidates = [p for p in paths(root) if p]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        node, key = parent_of(root, path)
        at = apiserver.schema_at(schema, path)
        action = draw(st.sampled_from(ACTIONS))
        if action == "delete":
            del node[key]
        elif action == "duplicate" and isinstance(node, list):
            node.append(copy.deepcopy(node[key]))
        elif action == "tweak":
            node[key] = draw(near(node[key], at))
        elif action == "add" and isinstance(node[key], dict):
            absent = sorted(set((at or {}).get("properties") or {}) - set(node[key]))
            if absent:
                name = draw(st.sampled_from(absent))
                node[key][name] = draw(generated(at["properties"][name]))
        else:
            node[key] = draw(NASTY_VALUES)


@st.composite
def mutated(draw: st.DrawFn, xr: dict[str, Any]) -> dict[str, Any]:
    """``xr`` with one to three mutations of its spec."""
    xr = copy.deepcopy(xr)
    if isinstance(xr.get("spec"), dict):
        mutate(draw, xr["spec"], apiserver.subschema(apiserver.openapi_schema(xr), "spec"))
    return xr


@st.composite
def mutated_object(draw: st.DrawFn, obj: dict[str, Any]) -> dict[str, Any]:
    """An observed or required object with its spec, status or labels mutated, within what its
    schema admits: the API server holds nothing else, so nothing else reaches a function."""
    obj = copy.deepcopy(obj)
    roots = [k for k in ("spec", "status") if isinstance(obj.get(k), dict) and obj[k]]
    labels = (obj.get("metadata") or {}).get("labels")
    choices = [*roots, "labels"] if labels else roots
    if not choices:
        return obj
    root = draw(st.sampled_from(choices))
    if root == "labels":
        mutate(draw, labels, None)
    else:
        mutate(draw, obj[root], apiserver.subschema(apiserver.openapi_schema(obj), root))
    # The API server holds only objects its schema and ObjectMeta validation admit.
    assume(not apiserver.schema_errors(obj))
    assume(not any(apiserver.schema_errors(m) for m in apiserver.embedded_manifests(obj)))
    assume(not apiserver.metadata_errors(obj))
    return obj


# --- what the API server would never hold, but a request can carry ----------------------------

NON_FINITE = st.sampled_from([float("nan"), float("inf"), float("-inf")])
BROKEN_STATUS = st.one_of(
    st.text(max_size=10),
    st.integers(),
    st.lists(st.text(max_size=5), max_size=3),
    st.just(None),
)
BROKEN_CONDITIONS = st.one_of(
    st.text(max_size=10),
    st.lists(st.one_of(st.text(max_size=5), st.integers(), st.none()), min_size=1, max_size=3),
    st.lists(
        st.fixed_dictionaries({}, optional={"status": st.just("True"), "type": st.integers()}),
        min_size=1,
        max_size=2,
    ),
)
IMPOSTOR_TYPES = st.sampled_from(
    [("v1", "ConfigMap"), ("v1", "Secret"), ("apps/v1", "Deployment"), ("", "")]
)


@st.composite
def hostile_observed(draw: st.DrawFn, obj: dict[str, Any]) -> dict[str, Any]:
    """An observed object with its status broken (not an object, conditions not conditions) or
    its apiVersion/kind replaced (an impostor under a composed name)."""
    obj = copy.deepcopy(obj)
    how = draw(st.sampled_from(["status", "conditions", "impostor"]))
    if how == "status":
        obj["status"] = draw(BROKEN_STATUS)
    elif how == "conditions":
        status = obj["status"] if isinstance(obj.get("status"), dict) else {}
        status["conditions"] = draw(BROKEN_CONDITIONS)
        obj["status"] = status
    else:
        obj["apiVersion"], obj["kind"] = draw(IMPOSTOR_TYPES)
    return obj


DNS_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"


@st.composite
def legal_name(draw: st.DrawFn) -> str:
    """A DNS-1123 subdomain of any legal length, the long end weighted: 1..253 characters."""
    length = draw(
        st.one_of(st.sampled_from([62, 63, 64, 65, 127, 200, 252, 253]), st.integers(1, 253))
    )
    first = draw(st.sampled_from(DNS_CHARS))
    inner = max(0, length - 2)
    middle = draw(st.text(alphabet=DNS_CHARS + "-", min_size=inner, max_size=inner))
    last = draw(st.sampled_from(DNS_CHARS)) if length > 1 else ""
    return (first + middle + last)[:length]


@st.composite
def with_non_finite(draw: st.DrawFn, xr: dict[str, Any]) -> dict[str, Any]:
    """``xr`` with one number of its spec (or a new field) made NaN or infinite."""
    xr = copy.deepcopy(xr)
    spec = xr.get("spec")
    if not isinstance(spec, dict):
        return xr
    numbers = [
        p
        for p in paths(spec)
        if p
        and isinstance(parent_of(spec, p)[0][p[-1]], int | float)
        and not isinstance(parent_of(spec, p)[0][p[-1]], bool)
    ]
    value = draw(NON_FINITE)
    if numbers:
        node, key = parent_of(spec, draw(st.sampled_from(numbers)))
        node[key] = value
    else:
        spec["replicas"] = value
    return xr
