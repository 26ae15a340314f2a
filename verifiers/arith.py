"""Arithmetic the notes state: sizes, counts, ratios, FLOPs, evaluated exactly.

Expressions are parsed with `ast` and evaluated over a closed set of
operators and functions; hardware constants come from sources/hardware.yaml
(`H100.sm_count`), never from literals in code.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from kb.registry import Context, Outcome, Params, verifier

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_FUNCS = {
    "ceil": math.ceil, "floor": math.floor, "min": min, "max": max, "log2": math.log2,
    "sqrt": math.sqrt, "abs": abs, "round": round, "log": math.log, "exp": math.exp,
}


class ArithParams(Params):
    """An expression and the named values it may use."""

    expr: str
    vars: dict[str, float | int] = {}


class ExprError(ValueError):
    """The expression uses something outside the allowed arithmetic."""


def evaluate(expr: str, names: dict[str, Any], hardware: dict[str, dict[str, float]]) -> float | int:
    """Evaluate `expr` over numbers, `names` and `GPU.constant` lookups."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            val = ev(node.operand)
            return -val if isinstance(node.op, ast.USub) else val
        if isinstance(node, ast.Name):
            if node.id in names:
                return names[node.id]
            raise ExprError(f"unknown name {node.id!r}")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            gpu, field = node.value.id, node.attr
            if gpu in hardware and field in hardware[gpu]:
                return hardware[gpu][field]
            raise ExprError(f"unknown hardware constant {gpu}.{field}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise ExprError(f"unsupported expression element: {ast.dump(node)[:60]}")

    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"not an arithmetic expression: {exc.msg}") from exc
    return ev(tree)


@verifier("arith.eval", kind="cpu-check", params=ArithParams, timeout_s=10)
def arith_eval(p: ArithParams, ctx: Context) -> Outcome:
    """Evaluate the stated arithmetic; the claim's expectation names the value the note gives."""
    value = evaluate(p.expr, dict(p.vars), ctx.hardware)
    return Outcome(measurements={"value": (value, "")}, log=f"{p.expr} = {value}")
