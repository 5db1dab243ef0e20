"""The Kubernetes CEL types and functions that DRA selectors use, declared for cel-expr-python.

`kubernetes.Quantity` and `kubernetes.Semver` are CEL object types backed by small protobuf
messages built at import time: a quantity's exact value plus how Kubernetes stores it (which
`isInteger()`, `add()` and `asApproximateFloat()` reveal), a version without its build
metadata. CEL compares messages field by field, so `==` on quantities is rewritten to
`plnt__k8s_equals` (plnt/cel/_checked.py, TEMPLATES below). Field names carry a `plnt_`
prefix because CEL can select message fields and Kubernetes' opaque types have none
(`semver("1.0.0").major` without parentheses must stay an error). The orderings are declared
again with Kubernetes' cross-type numeric overloads (`ordering_decls`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache
from typing import Protocol, cast

from cel_expr_python import cel
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    message_factory,
    timestamp_pb2,
    wrappers_pb2,
)

from plnt import quantity as q
from plnt.cel import semver as sv

# How Kubernetes stores a quantity: an int64Amount (value x 10^scale) or an inf.Dec.
SCALED_AMOUNT, DECIMAL_AMOUNT = 1, 2


def _descriptor_pool() -> descriptor_pool.DescriptorPool:
    proto = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="plnt/kubernetes_cel.proto", package="kubernetes", syntax="proto3"
    )
    fields = {
        "Quantity": [
            ("plnt_value", proto.TYPE_STRING),
            ("plnt_kind", proto.TYPE_INT32),
            ("plnt_scale", proto.TYPE_INT32),
        ],
        "Semver": [
            ("plnt_major", proto.TYPE_UINT64),
            ("plnt_minor", proto.TYPE_UINT64),
            ("plnt_patch", proto.TYPE_UINT64),
            ("plnt_pre", proto.TYPE_STRING),
        ],
    }
    for name, members in fields.items():
        message = file.message_type.add(name=name)
        for number, (field_name, field_type) in enumerate(members, start=1):
            message.field.add(
                name=field_name, number=number, type=field_type, label=proto.LABEL_OPTIONAL
            )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return pool


class QuantityFields(Protocol):
    """What `QuantityMessage` carries (its class is built at run time, so typed here)."""

    plnt_value: str
    plnt_kind: int
    plnt_scale: int

    def __init__(self, *, plnt_value: str, plnt_kind: int, plnt_scale: int) -> None: ...


class SemverFields(Protocol):
    """What `SemverMessage` carries."""

    plnt_major: int
    plnt_minor: int
    plnt_patch: int
    plnt_pre: str

    def __init__(
        self, *, plnt_major: int, plnt_minor: int, plnt_patch: int, plnt_pre: str
    ) -> None: ...


POOL = _descriptor_pool()
# The descriptors above declare exactly the fields of these Protocols.
QuantityMessage = cast(
    "type[QuantityFields]",
    message_factory.GetMessageClass(POOL.FindMessageTypeByName("kubernetes.Quantity")),
)
SemverMessage = cast(
    "type[SemverFields]",
    message_factory.GetMessageClass(POOL.FindMessageTypeByName("kubernetes.Semver")),
)
QUANTITY = cel.Type("kubernetes.Quantity")
SEMVER = cel.Type("kubernetes.Semver")


def quantity_message(value: q.Quantity) -> QuantityFields:
    """The value plus how Kubernetes stores it (int64Amount scale, or inf.Dec digits), which
    isInteger(), add() and asApproximateFloat() depend on. Equality does not compare
    messages: `==` is rewritten to k8s_equals (plnt/cel/_checked.py)."""
    if value.int_amount is None:
        kind, scale = DECIMAL_AMOUNT, value.dec_scale
    else:
        kind, scale = SCALED_AMOUNT, value.int_amount[1]
    return QuantityMessage(plnt_value=str(value.value), plnt_kind=kind, plnt_scale=scale)


def quantity_value(message: QuantityFields) -> q.Quantity:
    value, scale = Fraction(message.plnt_value), message.plnt_scale
    if message.plnt_kind == DECIMAL_AMOUNT:
        return q.Quantity(value, q.DECIMAL_SI, None, scale)
    return q.Quantity(value, q.DECIMAL_SI, (int(value / Fraction(10) ** scale), scale))


def semver_message(version: sv.Semver) -> SemverFields:
    return SemverMessage(
        plnt_major=version.major,
        plnt_minor=version.minor,
        plnt_patch=version.patch,
        plnt_pre=version.pre_string,
    )


@lru_cache(maxsize=1024)
def _parse_quantity_cached(text: str) -> tuple[str, int, int]:
    message = quantity_message(q.parse_quantity(text))
    return message.plnt_value, message.plnt_kind, message.plnt_scale


def _parse_quantity(text: str) -> QuantityFields:
    value, kind, scale = _parse_quantity_cached(text)
    return QuantityMessage(plnt_value=value, plnt_kind=kind, plnt_scale=scale)


@lru_cache(maxsize=4096)
def _quantity_of(value: str, kind: int, scale: int) -> q.Quantity:
    return quantity_value(QuantityMessage(plnt_value=value, plnt_kind=kind, plnt_scale=scale))


def _as_integer(message: QuantityFields) -> int:
    value, ok = quantity_value(message).as_int64()
    if not ok:
        raise ValueError("cannot convert value to integer")
    return value


def _quantity_op(op: str) -> Callable:
    def apply(left: QuantityFields, right: QuantityFields | int) -> QuantityFields:
        other = q.from_int(right) if isinstance(right, int) else quantity_value(right)
        return quantity_message(getattr(quantity_value(left), op)(other))

    return apply


def _qcmp(left: QuantityFields, right: QuantityFields) -> int:
    a = _quantity_of(left.plnt_value, left.plnt_kind, left.plnt_scale)
    return a.compare(_quantity_of(right.plnt_value, right.plnt_kind, right.plnt_scale))


@lru_cache(maxsize=4096)
def _semver_of(major: int, minor: int, patch: int, pre: str) -> sv.Semver:
    return sv.parse_semver(f"{major}.{minor}.{patch}" + (f"-{pre}" if pre else ""))


def _scmp(left: SemverFields, right: SemverFields) -> int:
    a = _semver_of(left.plnt_major, left.plnt_minor, left.plnt_patch, left.plnt_pre)
    return a.compare(
        _semver_of(right.plnt_major, right.plnt_minor, right.plnt_patch, right.plnt_pre)
    )


def _k8s_equals(left: object, right: object) -> bool:
    """Quantity.Equal / Semver.Equal: values of the same type, anything else is an error."""
    if isinstance(left, QuantityMessage) and isinstance(right, QuantityMessage):
        return _qcmp(left, right) == 0
    if isinstance(left, SemverMessage) and isinstance(right, SemverMessage):
        return left == right
    raise TypeError("no such overload")


def _entries_to_map(entries: list) -> dict:
    """The map a transformMap / transformMapEntry builds. cel-expr-python has no runtime for
    cel.@mapInsert, so plnt/cel/_checked.py makes the comprehension collect
    [key, value, value is a uint] entries and hands them here once, at the end (uint map
    keys come back as ints). A repeated key is an error, as in cel-go's mapInsert."""
    out: dict = {}
    for key, value, value_is_uint in entries:
        if key in out:
            held = next(k for k in out if k == key)
            if isinstance(held, bool) == isinstance(key, bool):
                raise ValueError(f"insert failed: key {_show(key)} already exists")
            raise ValueError(
                f"map keys {_show(held)} and {_show(key)} cannot be held together here"
            )
        out[key] = wrappers_pb2.UInt64Value(value=value) if value_is_uint else _to_cel(value)
    return out


def _fail(message: str) -> None:
    raise ValueError(message)


def _show(key: object) -> str:
    return str(key).lower() if isinstance(key, bool) else str(key)


def _to_cel(value: object) -> object:
    """A value handed to Python back into something cel-expr-python converts to the same CEL
    value; uints nested in lists and maps come back as ints (docs/cel.md)."""
    if isinstance(value, datetime.timedelta):
        duration = duration_pb2.Duration()
        duration.FromTimedelta(value)
        return duration
    if isinstance(value, datetime.datetime):
        timestamp = timestamp_pb2.Timestamp()
        timestamp.FromDatetime(value)
        return timestamp
    if isinstance(value, list):
        return [_to_cel(item) for item in value]
    if isinstance(value, dict):
        return {key: _to_cel(item) for key, item in value.items()}
    if isinstance(value, cel.Type):
        raise ValueError("a transformMap result holding type values is not supported here")
    return value


B, INT, S = cel.Type.BOOL, cel.Type.INT, cel.Type.STRING
D, U = cel.Type.DOUBLE, cel.Type.UINT
ANY_MAP = cel.Type.Map(cel.Type.DYN, cel.Type.DYN)

# name -> [(overload id, result, parameters, is_member, implementation)]
OVERLOADS: dict[str, list[tuple[str, cel.Type, list[cel.Type], bool, Callable]]] = {
    "quantity": [("string_to_quantity", QUANTITY, [S], False, _parse_quantity)],
    "isQuantity": [("is_quantity_string", B, [S], False, q.is_quantity)],
    "sign": [("quantity_sign", INT, [QUANTITY], False, lambda m: quantity_value(m).sign())],
    "isGreaterThan": [
        ("quantity_is_greater_than", B, [QUANTITY, QUANTITY], True, lambda a, b: _qcmp(a, b) > 0),
        ("semver_is_greater_than", B, [SEMVER, SEMVER], True, lambda a, b: _scmp(a, b) > 0),
    ],
    "isLessThan": [
        ("quantity_is_less_than", B, [QUANTITY, QUANTITY], True, lambda a, b: _qcmp(a, b) < 0),
        ("semver_is_less_than", B, [SEMVER, SEMVER], True, lambda a, b: _scmp(a, b) < 0),
    ],
    "compareTo": [
        ("quantity_compare_to", INT, [QUANTITY, QUANTITY], True, _qcmp),
        ("semver_compare_to", INT, [SEMVER, SEMVER], True, _scmp),
    ],
    "asApproximateFloat": [
        (
            "quantity_get_float",
            cel.Type.DOUBLE,
            [QUANTITY],
            True,
            lambda m: quantity_value(m).as_approximate_float(),
        )
    ],
    "asInteger": [("quantity_get_int", INT, [QUANTITY], True, _as_integer)],
    "isInteger": [
        ("quantity_is_integer", B, [QUANTITY], True, lambda m: quantity_value(m).as_int64()[1])
    ],
    "add": [
        ("quantity_add", QUANTITY, [QUANTITY, QUANTITY], True, _quantity_op("add")),
        ("quantity_add_int", QUANTITY, [QUANTITY, INT], True, _quantity_op("add")),
    ],
    "sub": [
        ("quantity_sub", QUANTITY, [QUANTITY, QUANTITY], True, _quantity_op("sub")),
        ("quantity_sub_int", QUANTITY, [QUANTITY, INT], True, _quantity_op("sub")),
    ],
    "semver": [
        ("string_to_semver", SEMVER, [S], False, lambda s: semver_message(sv.parse_semver(s))),
        (
            "string_bool_to_semver",
            SEMVER,
            [S, B],
            False,
            lambda s, n: semver_message((sv.normalize_and_parse if n else sv.parse_semver)(s)),
        ),
    ],
    "isSemver": [
        ("is_semver_string", B, [S], False, sv.is_semver),
        ("is_semver_string_bool", B, [S, B], False, sv.is_semver),
    ],
    "plnt__k8s_equals": [
        ("plnt__quantity_equals", B, [QUANTITY, QUANTITY], False, _k8s_equals),
        ("plnt__semver_equals", B, [SEMVER, SEMVER], False, _k8s_equals),
    ],
    "plnt__fail": [("plnt__fail", cel.Type.DYN, [S], False, _fail)],
    "plnt__entries_to_map": [
        ("plnt__entries_to_map", ANY_MAP, [cel.Type.List(cel.Type.DYN)], False, _entries_to_map)
    ],
    "major": [("semver_major", INT, [SEMVER], True, lambda m: m.plnt_major)],
    "minor": [("semver_minor", INT, [SEMVER], True, lambda m: m.plnt_minor)],
    "patch": [("semver_patch", INT, [SEMVER], True, lambda m: m.plnt_patch)],
}


def _dispatch(overloads: list) -> Callable:
    """cel-cpp dispatches on value kinds, and both of our types are messages: one callable
    per arity picks the overload by the Python message class."""
    by_types = {tuple(_py_type(p) for p in params): impl for _, _, params, _, impl in overloads}

    def call(*args: object) -> object:
        for types, impl in by_types.items():
            if len(types) == len(args) and all(
                t is None or isinstance(a, t) for t, a in zip(types, args, strict=True)
            ):
                return impl(*args)
        raise TypeError("no such overload")

    return call


def _py_type(param: cel.Type) -> type | None:
    return {"kubernetes.Quantity": QuantityMessage, "kubernetes.Semver": SemverMessage}.get(
        param.name()
    )


_ORDERED = [
    (B, "bool"),
    (INT, "int64"),
    (U, "uint64"),
    (D, "double"),
    (S, "string"),
    (cel.Type.BYTES, "bytes"),
    (cel.Type.TIMESTAMP, "timestamp"),
    (cel.Type.DURATION, "duration"),
]
_NUMERIC = [(INT, "int64"), (U, "uint64"), (D, "double")]
_ORDERINGS = {"_<_": "less", "_<=_": "less_equals", "_>_": "greater", "_>=_": "greater_equals"}


def ordering_decls() -> list[cel.FunctionDecl]:
    """The standard orderings plus int/uint/double against each other, which Kubernetes'
    cel-go declares (CrossTypeNumericComparisons) and cel-cpp's checker does not; cel-cpp's
    runtime already compares them. Declarations only: the standard implementations run."""
    decls = []
    for function, name in _ORDERINGS.items():
        overloads = [cel.Overload(f"{name}_{n}", B, [t, t]) for t, n in _ORDERED]
        overloads += [
            cel.Overload(f"{name}_{an}_{bn}", B, [a, b])
            for a, an in _NUMERIC
            for b, bn in _NUMERIC
            if an != bn
        ]
        decls.append(cel.FunctionDecl(function, overloads))
    return decls


def function_decls() -> list[cel.FunctionDecl]:
    decls = []
    for name, overloads in OVERLOADS.items():
        impl = _dispatch(overloads)
        arities_seen: set[tuple[int, bool, tuple]] = set()
        built = []
        for oid, result, params, member, _ in overloads:
            kinds = (len(params), member, tuple(_py_type(p) is None for p in params))
            first = kinds not in arities_seen
            arities_seen.add(kinds)
            built.append(
                cel.Overload(oid, result, params, is_member=member, impl=impl)
                if first
                else cel.Overload(oid, result, params, is_member=member)
            )
        decls.append(cel.FunctionDecl(name, built))
    return decls


# The CEL extensions of the Kubernetes base environment that cel-expr-python ships.
ENV_CONFIG = """
name: plnt-dra
extensions:
  - name: strings
    version: 2
  - name: lists
    version: latest
  - name: sets
  - name: two-var-comprehensions
  - name: bindings
  - name: optional
stdlib:
  exclude_functions:
    - name: _<_
    - name: _<=_
    - name: _>_
    - name: _>=_
"""


DRIVER_VAR = "plnt__device_driver"
CAPACITY_VAR = "plnt__device_capacity"
ATTRIBUTES_VAR = "plnt__device_attributes"
ATTRIBUTES_TYPE = cel.Type.Map(S, cel.Type.Map(S, cel.Type.DYN))
CAPACITY_TYPE = cel.Type.Map(S, cel.Type.Map(S, QUANTITY))

_IS_K8S = "(type({0}) == kubernetes.Semver || type({0}) == kubernetes.Quantity)"
# cel-go's list equality: sizes, then each pair with Equal (values for quantities), skipping
# a pair whose Equal errors (a quantity or version against another type that is not null).
_EQ_LIST = (
    "size(plnt__a) == size(plnt__b) && plnt__a.all(plnt__i, plnt__x,"
    f" {_IS_K8S.format('plnt__x')} ? (plnt__b[plnt__i] == null ? false"
    " : type(plnt__x) != type(plnt__b[plnt__i]) || plnt__k8s_equals(plnt__x, plnt__b[plnt__i]))"
    " : plnt__x == plnt__b[plnt__i])"
)
_NO_OPTIONAL = "a transformMap result holding optional values is not supported here"
# Templates for plnt/cel/_checked.py's Rewriter, over placeholder variables plnt__a/b/m/k.
TEMPLATES = {
    "eq_dyn": "(type(plnt__a) == kubernetes.Semver || type(plnt__a) == kubernetes.Quantity)"
    " ? (plnt__b == null ? false : plnt__k8s_equals(plnt__a, plnt__b)) : plnt__a == plnt__b",
    "ne_dyn": "type(plnt__a) == kubernetes.Quantity && type(plnt__b) == kubernetes.Quantity"
    " ? !plnt__k8s_equals(plnt__a, plnt__b) : plnt__a != plnt__b",
    "eq_quantity": "plnt__k8s_equals(plnt__a, plnt__b)",
    "ne_quantity": "!plnt__k8s_equals(plnt__a, plnt__b)",
    "eq_list": _EQ_LIST,
    "ne_list": f"!({_EQ_LIST})",
    # cel-go's list Contains: Equal(x, each); true if any is, else an error if any erred
    "in_list": f"plnt__b.exists(plnt__x, {_IS_K8S.format('plnt__a')}"
    " ? (plnt__x == null ? false : plnt__k8s_equals(plnt__a, plnt__x)) : plnt__a == plnt__x)",
    "lookup": "plnt__m[?plnt__k].orValue({})",
    # transformMap / transformMapEntry: entries collected in a list (m), one map at the end.
    "map_entries": "[]",
    "map_insert": "cel.bind(plnt__v, plnt__a, type(plnt__v) == optional_type"
    f" ? plnt__fail({_NO_OPTIONAL!r}) : plnt__m + [[plnt__k, plnt__v, type(plnt__v) == uint]])",
    "map_insert_entries": "cel.bind(plnt__v, plnt__a, plnt__m + plnt__v.map(plnt__x,"
    f" type(plnt__v[plnt__x]) == optional_type ? plnt__fail({_NO_OPTIONAL!r})"
    " : [plnt__x, plnt__v[plnt__x], type(plnt__v[plnt__x]) == uint]))",
    "map_finish": "plnt__entries_to_map(plnt__m)",
    "optional_lookup": "optional.of(plnt__m[?plnt__k].orValue({}))",
}


def new_env() -> cel.Env:
    return cel.NewEnv(
        descriptor_pool=POOL,
        config=cel.NewEnvConfigFromYaml(ENV_CONFIG),
        variables={
            "device": cel.Type.Map(S, cel.Type.DYN),
            DRIVER_VAR: S,
            ATTRIBUTES_VAR: ATTRIBUTES_TYPE,
            CAPACITY_VAR: CAPACITY_TYPE,
            **{f"plnt__{name}": cel.Type.DYN for name in "abmk"},
        },
        functions=function_decls() + ordering_decls(),
    )
