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
    assert _checked.Checked.of(serialized).root.dump() == _wire.first(
        _wire.decode(_wire.first(_wire.decode(serialized), 2)), 4
    )
