"""plnt.cel behaviours the scheduler relies on: API, caching, limits, error messages."""

from __future__ import annotations

import pytest

from plnt import cel
from plnt_host.bench.cel import DEVICE

# The benchmark's device, plus an attribute under another domain.
H100 = {
    **DEVICE,
    "attributes": {**DEVICE["attributes"], "other.domain.io/foo": {"string": "x"}},
}
SELECTOR = (
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0 && '
    'device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("9.0.0")) >= 0'
)


def test_typical_selector_matches_h100_and_not_a_smaller_gpu():
    small = {**H100, "capacity": {"memory": {"value": "24Gi"}}}
    assert cel.evaluate(SELECTOR, H100) is True
    assert cel.evaluate(SELECTOR, small) is False


def test_compiled_once_and_reusable_with_a_prepared_device():
    assert cel.compile(SELECTOR) is cel.compile(SELECTOR)
    device = cel.Device.of(H100)
    assert cel.compile(SELECTOR).evaluate(device) is True


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ('device.attributes["gpu.nvidia.com"].nope == 1', "nope"),
        ("device.driver", "must yield a bool"),
        ("1 +", "compilation failed"),
        ("device.driver > 1", "device.driver"),
        ('quantity("x").isInteger()', "quantities must match"),
    ],
)
def test_errors_name_the_problem(expression, fragment):
    with pytest.raises(cel.CelError) as raised:
        cel.evaluate(expression, H100)
    assert fragment in str(raised.value)
    assert isinstance(cel.matches(expression, H100), cel.CelError)


def test_missing_domain_is_an_empty_map_and_qualified_names_keep_their_domain():
    assert cel.evaluate('device.attributes["absent.example.com"].size() == 0', H100)
    assert cel.evaluate('device.attributes["other.domain.io"].foo == "x"', H100)
    assert not cel.evaluate('"foo" in device.attributes["gpu.nvidia.com"]', H100)


def test_length_limit():
    at_limit = "true" + " && true" * ((cel.MAX_EXPRESSION_LENGTH - 4) // 8)
    assert len(at_limit) <= cel.MAX_EXPRESSION_LENGTH
    assert cel.evaluate(at_limit, H100)
    with pytest.raises(cel.CelError, match="too long"):
        cel.compile(at_limit + " && true")


def test_cost_bound_rejects_deeply_nested_comprehensions():
    nested = "[1].all(a, [1].all(b, [1].all(c, true)))"
    with pytest.raises(cel.CelError, match="nested deeper"):
        cel.compile(nested)
    assert cel.evaluate("[1].all(a, [1].all(b, true))", H100)


def test_non_string_expression_is_a_cel_error():
    with pytest.raises(cel.CelError, match="must be a string"):
        cel.compile(["true"])


def test_bad_device_data_is_a_cel_error():
    with pytest.raises(cel.CelError, match="parse semantic version"):
        cel.evaluate("true", {**H100, "attributes": {"v": {"version": "1.0"}}})
    with pytest.raises(cel.CelError, match="attribute mig"):
        cel.evaluate("true", {**H100, "attributes": {"mig": True}})
    with pytest.raises(cel.CelError, match="capacity memory"):
        cel.evaluate("true", {**H100, "capacity": {"memory": {"value": "lots"}}})


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.attributes["gpu.nvidia.com"].cudaComputeCapability.major() >= 9.0', True),
        ('device.capacity["gpu.nvidia.com"].memory.asApproximateFloat() > 100', True),
        ('2.5 > device.capacity["gpu.nvidia.com"].memory.asInteger()', False),
    ],
)
def test_numeric_literals_order_across_int_uint_double_like_kubernetes(expression, expected):
    assert cel.evaluate(expression, H100) is expected


def test_numeric_equality_across_types_stays_a_compile_error():
    with pytest.raises(cel.CelError, match="compilation failed"):
        cel.compile('device.capacity["gpu.nvidia.com"].memory.asInteger() == 1.0')


def test_bench_reports_each_timing():
    from plnt_host.bench.cel import bench

    figures = bench(rounds=20)
    timings = {k: v for k, v in figures.items() if k.endswith("_s")}
    assert set(timings) == {
        "compile_s",
        "device_convert_s",
        "evaluate_prepared_s",
        "evaluate_from_dict_s",
    }
    assert all(value > 0 for value in timings.values())
    assert figures["library"].startswith("cel-expr-python")
