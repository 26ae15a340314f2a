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

from pydantic import Field, field_validator

from kb.registry import Context, Outcome, Params, verifier

# Memory bound: Python integers grow without limit, so `9 ** 9 ** 9` would try to build a number of
# hundreds of megabytes. No integer operand or result may exceed this many bits (about 19,700 digits);
# the size of a power or product is computed from its operands' sizes before it is evaluated.
MAX_INT_BITS = 1 << 16
MAX_EXPR_CHARS = 10_000

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

    expr: str = Field(max_length=MAX_EXPR_CHARS)
    vars: dict[str, float | int] = {}

    @field_validator("vars")
    @classmethod
    def _bounded(cls, v: dict[str, float | int]) -> dict[str, float | int]:
        for name, x in v.items():
            if isinstance(x, int) and x.bit_length() > MAX_INT_BITS:
                raise ValueError(f"variable {name!r} is an integer of {x.bit_length():,} bits, above the bound of "
                                 f"{MAX_INT_BITS:,}")
        return v


class ExprError(ValueError):
    """The expression uses something outside the allowed arithmetic."""


def _bits(x: Any) -> int:
    return abs(x).bit_length() if isinstance(x, int) else 0


def _apply(op: type, a: Any, b: Any) -> Any:
    """a <op> b, refusing an integer result above MAX_INT_BITS before computing it."""
    if isinstance(a, int) and isinstance(b, int):
        if op is ast.Pow and b > 0 and abs(a) > 1:
            est = b * (_bits(a) - 1) if b.bit_length() < 64 else MAX_INT_BITS + 1  # |a| >= 2**(bits-1)
            if est > MAX_INT_BITS:
                raise ExprError(f"{a} ** {b} would be an integer of at least {min(est, 10**18):,} bits, above the "
                                f"bound of {MAX_INT_BITS:,}")
        elif op is ast.Mult and _bits(a) + _bits(b) - 1 > MAX_INT_BITS:
            raise ExprError(f"the product would be an integer of at least {_bits(a) + _bits(b) - 1:,} bits, above "
                            f"the bound of {MAX_INT_BITS:,}")
    out = _BINOPS[op](a, b)
    if _bits(out) > MAX_INT_BITS:
        raise ExprError(f"an intermediate integer has {_bits(out):,} bits, above the bound of {MAX_INT_BITS:,}")
    return out


def evaluate(expr: str, names: dict[str, Any], hardware: dict[str, dict[str, float]]) -> float | int:
    """Evaluate `expr` over numbers, `names` and `GPU.constant` lookups."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _apply(type(node.op), ev(node.left), ev(node.right))
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
            out = _FUNCS[node.func.id](*[ev(a) for a in node.args])
            if _bits(out) > MAX_INT_BITS:
                raise ExprError(f"{node.func.id}(...) gives an integer of {_bits(out):,} bits, above the bound of "
                                f"{MAX_INT_BITS:,}")
            return out
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
