"""The checked-expression pass (plnt/cel/_checked.py) on its own, without the oracle: what it
rejects, what it rewrites, and that expressions needing no rewrite keep cel-cpp's program.
test_parity.py checks the same shapes against Kubernetes."""

from __future__ import annotations

import pytest

from plnt import cel
from plnt.cel import _checked, _wire
from tests.cel.test_evaluator import H100

A = 'device.attributes["gpu.nvidia.com"]'


@pytest.mark.parametrize(
    ("expression", "outcome"),
    [
        # Kubernetes' Quantity.Equal compares values; representation still shows elsewhere
        ('quantity("1") == quantity("1000m")', True),
        ('quantity("0.5") != quantity("500m")', False),
        ('quantity("1000m").isInteger()', False),
        ('dyn(quantity("1")) == quantity("1000m")', True),
        ('device.capacity["gpu.nvidia.com"].memory == quantity("85899345920000m")', True),
        # a version meeting another type: error on the left of ==, false on the right
        (f'{A}.cudaComputeCapability == "9.0.0"', "error"),
        (f'"9.0.0" == {A}.cudaComputeCapability', False),
        (f'{A}.cudaComputeCapability != "9.0.0"', True),
        (f"{A}.cudaComputeCapability == null", False),
        (f'{A}.cudaComputeCapability == semver("9.0.0+build")', True),
        (f'{A}.productName == "NVIDIA H100 80GB HBM3"', True),
        # homogeneous aggregate literals
        ('[1, "a"].size() == 2', "error"),
        ("[1, dyn(2)].size() == 2", "error"),
        ('{"a": 1, "b": "x"}.size() == 2', "error"),
        ('"%s %d".format(["a", 1]) == "a 1"', True),
        ("[[], [1]].size() == 2", True),
        # cross-type numeric ordering, with or without a literal
        ('device.capacity["gpu.nvidia.com"].memory.asInteger() >= 1.5', True),
        (
            'device.capacity["gpu.nvidia.com"].memory.asInteger() > '
            'device.capacity["gpu.nvidia.com"].memory.asApproximateFloat()',
            False,
        ),
        ("1 == 1.0", "error"),
        # domains the device lacks, however the key is given
        ('device.attributes["absent." + "example.com"].size() == 0', True),
        ('device.capacity["gpu.nvidia." + "com"].memory.isGreaterThan(quantity("1"))', True),
        ('device.attributes.size() > 0 && device.attributes["absent.io"].size() == 0', True),
        ('cel.bind(a, device.attributes, a["absent.io"].size() == 0)', True),
        ('device.attributes.size() > 0 && device.attributes[?"absent.io"].hasValue()', True),
        ("device.attributes.size() > 0 && has(device.attributes.absent)", True),
        ('device.attributes["gpu.nvidia." + "com"].missing', "error"),
        # typed device fields
        (f"{A} == 1", "error"),
        ("has(device.capacity) && has(device.driver)", True),
    ],
)
def test_kubernetes_semantics(expression, outcome):
    result = cel.matches(expression, H100)
    assert ("error" if isinstance(result, cel.CelError) else result) == outcome


def test_an_expression_needing_no_rewrite_keeps_the_compiled_program():
    checked = _checked.Checked.of(cel.compile(f"{A}.index >= 0").program.serialize())
    assert not any(node.ident() == "plnt__k8s_equals" for node in checked.root.walk())
    rewritten = _checked.Checked.of(cel.compile(f'{A}.productName == "x"').program.serialize())
    calls = {node.call()[0] for node in rewritten.root.walk() if node.call()}
    assert {"plnt__k8s_equals", "type", "_==_"} <= calls


def test_wire_format_round_trips_byte_for_byte():
    serialized = cel.compile('[1, 2].exists(x, x > 1) && {"a": -1}["a"] < 0').program.serialize()
    assert _wire.encode(_wire.decode(serialized)) == serialized
    assert _checked.Checked.of(serialized).root.dump() == _wire.first_bytes(
        _wire.decode(_wire.first_bytes(_wire.decode(serialized), 2)), 4
    )


def test_transform_map_builds_its_map_from_a_list_of_entries():
    expression = f'{A}.transformMap(k, v, k.startsWith("i"), v)'
    checked = _checked.Checked.of(cel.compile(f"{expression}.size() == 1").program.serialize())
    calls = {node.call()[0] for node in checked.root.walk() if node.call()}
    assert "cel.@mapInsert" not in calls
    assert {"plnt__entries_to_map", "_+_"} <= calls
    assert cel.evaluate(f"{expression}.size() == 1", H100)
    assert cel.evaluate(f'{expression}["index"] == 0', H100)
    assert not cel.evaluate(f'"productName" in {expression}', H100)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ('{"a": 1, "b": 1}.transformMapEntry(k, v, {v: k}).size() > 0', "key 1 already exists"),
        (f'{A}.transformMapEntry(k, v, {{"x": v}}).size() > 0', "key x already exists"),
        ('{"a": 1}.transformMap(k, v, optional.of(v)).size() > 0', "optional values"),
        ('{"a": 1}.transformMap(k, v, type(v)).size() > 0', "type values"),
    ],
)
def test_transform_map_failures_say_what_failed(expression, message):
    with pytest.raises(cel.CelError, match=message):
        cel.evaluate(expression, H100)


@pytest.mark.parametrize(
    "expression",
    [
        'type({"a": 2u}.transformMap(k, v, v).a) == uint',
        '{"a": duration("90s")}.transformMap(k, v, v).a == duration("1m30s")',
        '{"a": timestamp("2026-01-01T00:00:00Z")}.transformMap(k, v, v).a.getFullYear() == 2026',
        '{"a": quantity("1")}.transformMap(k, v, v).a.isLessThan(quantity("2"))',
        '{"a": semver("1.2.3")}.transformMap(k, v, v).a.minor() == 2',
        '{"a": [dyn(1), dyn("x")]}.transformMap(k, v, v).a[1] == "x"',
    ],
)
def test_transform_map_values_come_back_as_the_same_cel_values(expression):
    assert cel.evaluate(expression, H100) is True


@pytest.mark.parametrize(
    ("expression", "kind"),
    [
        ('duration("1s")', ("well_known", 3)),
        ('timestamp("2026-01-01T00:00:00Z")', ("well_known", 2)),
        ("int", ("type", ("prim", 2))),
        ("google.protobuf.Int64Value{value: 1}", ("wrapper", 2)),
    ],
)
def test_checked_types_of_every_kind_are_read(expression, kind):
    """The homogeneous-literal check reads well-known, wrapper and type types too."""
    assert _checked.result_type(cel.compile(f"[{expression}].size() == 1").program.serialize()) == (
        "prim",
        1,
    )
    literal = _checked.Checked.of(cel._ENV.compile(f"[{expression}]").serialize())
    assert literal.type_of(literal.root) == ("list", kind)
    assert cel.evaluate(f"[{expression}, {expression}].size() == 2", H100)


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 40 + "1" + ")" * 40 + " > 0",
        "1" + " + 1" * 40 + " > 0",
        f"{A}.productName" + ".lowerAscii()" * 40 + ' != ""',
    ],
)
def test_too_deep_for_the_parser_says_so_and_grouping_helps(expression):
    with pytest.raises(cel.CelError, match=r"more than 32 levels deep.*Kubernetes allows 250"):
        cel.compile(expression)
    assert cel.evaluate("(1" + " + 1" * 20 + ") + (1" + " + 1" * 20 + ") == 42", H100)
