"""A safe evaluator for axis expressions and constraints (never `eval`).

Accepted: int/float literals, axis names, `+ - * / // % **`, unary `+ -`, parentheses,
comparisons, `and` / `or` / `not`, and the functions `min`, `max`, `abs`, `ceil`, `floor`.
"""

from __future__ import annotations

import ast
import math
import operator

from solbench.spec.errors import SpecError

_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Not: operator.not_}
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_FUNCTIONS = {"min": min, "max": max, "abs": abs, "ceil": math.ceil, "floor": math.floor}
_MAX_EXPONENT = 64
_MAX_RESULT_BITS = 256  # axis sizes are far smaller; this keeps `((2 ** 64) ** 64) ** 64` from eating the machine


def parse(expression: str) -> ast.Expression:
    """Parse and validate an expression once; raises SpecError on anything not arithmetic."""
    if not isinstance(expression, str) or not expression.strip():
        raise SpecError(f"empty or non-string expression {expression!r}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise SpecError(f"cannot parse expression {expression!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.Expression, ast.Constant, ast.Name, ast.BinOp, ast.UnaryOp,
                               ast.Compare, ast.BoolOp, ast.Call, ast.Load, ast.And, ast.Or))
        ok = ok or type(node) in _BINARY or type(node) in _UNARY or type(node) in _COMPARE
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool)
                                               or not isinstance(node.value, (int, float))):
            ok = False
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                               and node.func.id in _FUNCTIONS and not node.keywords):
            ok = False
        if not ok:
            raise SpecError(f"expression {expression!r} uses {type(node).__name__}, which is not allowed")
    return tree


def names(expression: str) -> set[str]:
    """Axis names an expression refers to."""
    tree = parse(expression)
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in calls}


def evaluate(expression: str, values: dict[str, int | float]):
    """Evaluate `expression` with axis `values`; unknown names raise SpecError."""
    try:
        result = _eval(parse(expression).body, values, expression)
    except (OverflowError, TypeError, ValueError) as exc:
        raise SpecError(f"cannot evaluate {expression!r}: {exc}") from None
    _check_number(result, expression)
    return result


def _check_number(value, text: str):
    if isinstance(value, complex):
        raise SpecError(f"expression {text!r} gives a complex number")
    if isinstance(value, int) and value.bit_length() > _MAX_RESULT_BITS:
        raise SpecError(f"expression {text!r} gives a number too large for an axis")
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(f"expression {text!r} gives {value}")
    return value


def _eval(node: ast.AST, values: dict, text: str):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise SpecError(f"expression {text!r} refers to unknown axis {node.id!r}")
        return values[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, values, text), _eval(node.right, values, text)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise SpecError(f"exponent {right} too large in {text!r}")
        if isinstance(node.op, ast.Pow) and abs(left) > 1 and right * math.log2(abs(left)) > _MAX_RESULT_BITS:
            raise SpecError(f"{left} ** {right} is too large in {text!r}")
        try:
            return _check_number(_BINARY[type(node.op)](left, right), text)
        except ZeroDivisionError:
            raise SpecError(f"division by zero in {text!r} with {values}") from None
    if isinstance(node, ast.UnaryOp):
        return _check_number(_UNARY[type(node.op)](_eval(node.operand, values, text)), text)
    if isinstance(node, ast.BoolOp):
        results = [_eval(v, values, text) for v in node.values]
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, values, text)
        for op, comparator in zip(node.ops, node.comparators):
            right = _eval(comparator, values, text)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        return _FUNCTIONS[node.func.id](*[_eval(a, values, text) for a in node.args])
    raise SpecError(f"cannot evaluate {type(node).__name__} in {text!r}")


def as_size(value, what: str) -> int:
    """An axis value must be a non-negative integer (an integral float is accepted)."""
    if isinstance(value, bool):
        raise SpecError(f"{what} evaluated to a boolean")
    if isinstance(value, float):
        if not value.is_integer():
            raise SpecError(f"{what} evaluated to non-integer {value}")
        value = int(value)
    if not isinstance(value, int) or value < 0:
        raise SpecError(f"{what} must be a non-negative integer, got {value!r}")
    return value
