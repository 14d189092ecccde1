"""The axis expression evaluator: arithmetic in, everything else out, always as SpecError."""

from __future__ import annotations

import pytest

from solbench.spec import SpecError
from solbench.spec import axes as ax


@pytest.mark.parametrize(("expression", "expected"), [
    ("1", 1),
    ("2.5", 2.5),
    ("a", 6),
    ("a + b", 10),
    ("a - b", 2),
    ("a * b", 24),
    ("a / b", 1.5),
    ("7 // 2", 3),
    ("-7 // 2", -4),  # floor division, as in Python
    ("7 % 4", 3),
    ("-7 % 4", 1),
    ("2 ** 10", 1024),
    ("2 ** -1", 0.5),
    ("-a", -6),
    ("+a", 6),
    ("-(a - b)", -2),
    ("a + b * 2", 14),  # precedence: * before +
    ("(a + b) * 2", 20),
    ("2 ** 3 ** 2", 512),  # ** is right-associative
    ("-2 ** 2", -4),  # unary minus binds looser than **
    ("a * b // 5 % 3", 1),  # left to right: 24 // 5 = 4, 4 % 3 = 1
    ("  a  ", 6),  # surrounding whitespace is fine
    ("min(a, b)", 4),
    ("max(a, b, 9)", 9),
    ("abs(b - a)", 2),
    ("ceil(a / b)", 2),
    ("floor(a / b)", 1),
])
def test_arithmetic(expression, expected):
    result = ax.evaluate(expression, {"a": 6, "b": 4})
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(("expression", "expected"), [
    ("a > b", True),
    ("a < b", False),
    ("a >= 6", True),
    ("a <= 5", False),
    ("a == 6", True),
    ("a != 6", False),
    ("b < a < 7", True),  # chained comparison
    ("b < a < 6", False),
    ("a % 2 == 0 and b % 2 == 0", True),
    ("a > 100 or b == 4", True),
    ("a > 100 or b == 5", False),
    ("not a > 100", True),
    ("not (a > 1 and b > 1)", False),
])
def test_constraint_operators(expression, expected):
    assert ax.evaluate(expression, {"a": 6, "b": 4}) is expected


@pytest.mark.parametrize("expression", [
    "__import__('os').system('true')",  # a call to a non-whitelisted function
    "open('/etc/passwd')",
    "a.real",  # attribute
    "a.__class__.__bases__",
    "x[0]",  # subscript
    "(lambda: 1)()",
    "lambda: 1",
    "'text'",  # strings
    "b'bytes'",
    "f'{a}'",
    "[1, 2]",
    "(1, 2)",
    "{1: 2}",
    "{1}",
    "a if a else b",
    "(c := 3)",
    "True",  # booleans are not sizes
    "None",
    "a in b",
    "a is b",
    "a & b",  # bitwise operators are not in the language
    "a | b",
    "a << 2",
    "~a",
    "min(a, key=abs)",  # keyword arguments
    "min(*a)",
    "abs.__call__(1)",
    "[x for x in a]",
    "...",
    "",
    "   ",
])
def test_rejects_non_arithmetic(expression):
    with pytest.raises(SpecError):
        ax.evaluate(expression, {"a": 1, "b": 2, "x": 3})


def test_rejects_non_string():
    with pytest.raises(SpecError):
        ax.parse(None)  # type: ignore[arg-type]
    with pytest.raises(SpecError):
        ax.parse(3)  # type: ignore[arg-type]


def test_syntax_error_is_spec_error():
    with pytest.raises(SpecError, match="cannot parse"):
        ax.evaluate("a +", {"a": 1})


def test_dunder_import_name_is_just_an_unknown_axis():
    with pytest.raises(SpecError, match="unknown axis '__import__'"):
        ax.evaluate("__import__", {})


def test_unknown_name():
    with pytest.raises(SpecError, match="unknown axis 'c'"):
        ax.evaluate("a + c", {"a": 1})


@pytest.mark.parametrize("expression", ["a / 0", "a // 0", "a % 0", "a / (b - 2)", "0 ** -1", "a // 0.0"])
def test_division_by_zero(expression):
    with pytest.raises(SpecError, match="division by zero"):
        ax.evaluate(expression, {"a": 1, "b": 2})


@pytest.mark.parametrize("expression", ["2 ** 65", "2 ** -65", "2 ** 10 ** 10", "a ** (a * 100)"])
def test_power_exponent_is_bounded(expression):
    with pytest.raises(SpecError, match="too large"):
        ax.evaluate(expression, {"a": 2})


def test_power_at_the_limit_is_allowed():
    assert ax.evaluate("2 ** 64", {}) == 2**64


def test_names():
    assert ax.names("a * b + min(c, 4) // d") == {"a", "b", "c", "d"}
    assert ax.names("3") == set()


def test_names_validates():
    with pytest.raises(SpecError):
        ax.names("a.b")


def test_left_nested_powers_are_bounded():
    with pytest.raises(SpecError):
        ax.evaluate("((2 ** 64) ** 64) ** 64", {})


@pytest.mark.parametrize("expression", ["ceil(1, 2)", "min()", "min(1)", "abs()"])
def test_bad_function_arity_is_spec_error(expression):
    with pytest.raises(SpecError):
        ax.evaluate(expression, {})


@pytest.mark.parametrize("expression", ["(10.0 ** 64) ** 64", "ceil(1e999)"])
def test_float_overflow_is_spec_error(expression):
    with pytest.raises(SpecError):
        ax.evaluate(expression, {})


def test_complex_result_is_spec_error():
    with pytest.raises(SpecError):
        ax.evaluate("(-8) ** 0.5 < 1", {})


@pytest.mark.parametrize(("value", "expected"), [(0, 0), (7, 7), (8.0, 8)])
def test_as_size_accepts(value, expected):
    result = ax.as_size(value, "axis")
    assert result == expected and type(result) is int


@pytest.mark.parametrize("value", [-1, 2.5, True, False, None, "3", float("inf"), float("nan"), complex(1, 0)])
def test_as_size_rejects(value):
    with pytest.raises(SpecError):
        ax.as_size(value, "axis")
