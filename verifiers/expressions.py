"""Small arithmetic expressions over named quantities (``"2 * bags"``, ``"stops - 1"``), parsed without eval."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from functools import lru_cache

from guardrail.core.pysyntax import parse_python

__all__ = ["ExpressionError", "MissingQuantity", "evaluate", "expression_names"]

_MAX_CHARS = 200
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div)


class ExpressionError(ValueError):
    """Text that is not an expression of numbers, names, + - * / and parentheses."""


class MissingQuantity(KeyError):  # noqa: N818 - a KeyError callers catch by what is missing
    """An expression names a quantity the run has no value for."""


@lru_cache(maxsize=1024)
def _parse(text: str) -> ast.expr:
    if len(text) > _MAX_CHARS:
        raise ExpressionError(f"expression longer than {_MAX_CHARS} characters")
    try:
        tree = parse_python(text, mode="eval").body
    except SyntaxError as exc:
        raise ExpressionError(f"{text!r} is not an arithmetic expression: {exc.msg}") from exc
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and not isinstance(node.op, _OPERATORS):
            raise ExpressionError(f"{text!r}: only + - * / are allowed")
        if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.USub):
            raise ExpressionError(f"{text!r}: only unary minus is allowed")
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or not isinstance(node.value, int | float)):
            raise ExpressionError(f"{text!r}: {node.value!r} is not a number")
        if not isinstance(node, ast.BinOp | ast.UnaryOp | ast.Constant | ast.Name | ast.Load | ast.operator
                          | ast.unaryop):
            raise ExpressionError(f"{text!r}: {type(node).__name__} is not allowed (numbers, names, + - * /)")
    return tree


def expression_names(text: str) -> set[str]:
    """The quantity names an expression uses (raises `ExpressionError` when it is not one)."""
    return {node.id for node in ast.walk(_parse(text)) if isinstance(node, ast.Name)}


def evaluate(expression: float | str, values: Mapping[str, float]) -> float:
    """The expression's value; a number is itself. Raises `MissingQuantity` naming an unknown quantity."""
    if not isinstance(expression, str):
        return float(expression)
    return _eval(_parse(expression), values)


def _eval(node: ast.expr, values: Mapping[str, float]) -> float:
    if isinstance(node, ast.Constant):
        assert isinstance(node.value, int | float)  # _parse admits numeric constants only
        return float(node.value)
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise MissingQuantity(node.id)
        return float(values[node.id])
    if isinstance(node, ast.UnaryOp):
        return -_eval(node.operand, values)
    assert isinstance(node, ast.BinOp)
    left, right = _eval(node.left, values), _eval(node.right, values)
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    return left / right if right else float("nan")
